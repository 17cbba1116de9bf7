"""Many small replicas at once (B3-B5): PodCliqueSets of `per_pcs` replicas, one clique of one pod each."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from bench.cluster import BenchCluster
from bench.observer import Observer
from bench.workload import create, live_pods, pcs_uid, small_shape, wait_settled
from workflows.contract import replica_workflow_id


@dataclass(frozen=True)
class Fleet:
    namespace: str
    counts: dict[str, int]  # PCS name -> replicas

    @property
    def replicas(self) -> int:
        return sum(self.counts.values())

    def pods(self) -> list[tuple[str, int, str]]:
        """(pcs, replica index, pod name) of every replica's one pod."""
        return [(pcs, i, f"{pcs}-{i}-app-0") for pcs, n in self.counts.items() for i in range(n)]


def plan(namespace: str, replicas: int, per_pcs: int) -> Fleet:
    counts = {}
    for p in range(math.ceil(replicas / per_pcs)):
        counts[f"s{p:04d}"] = min(per_pcs, replicas - p * per_pcs)
    return Fleet(namespace, counts)


def create_all(cluster: BenchCluster, fleet: Fleet) -> None:
    for pcs, count in fleet.counts.items():
        create(cluster.kube, small_shape(pcs, fleet.namespace, count))


async def settle(observer: Observer, fleet: Fleet, timeout: float) -> tuple[float, float, float]:
    """Wait until every pod is released, every pod Ready, every PodClique mirrored Ready; returns those moments."""
    ns, n = fleet.namespace, fleet.replicas

    def released() -> bool:
        pods = live_pods(observer, ns)
        return len(pods) >= n and all(not p.state["gated"] for p in pods)

    def ready() -> bool:
        pods = live_pods(observer, ns)
        return len(pods) >= n and all(p.state["ready"] for p in pods)

    t_released = await asyncio.to_thread(observer.wait, released, timeout, f"{n} pods released", 0.25)
    t_ready = await asyncio.to_thread(observer.wait, ready, timeout, f"{n} pods Ready", 0.25)
    t_settled = await asyncio.to_thread(wait_settled, observer, ns, n, timeout)
    return t_released, t_ready, t_settled


def workflow_ids(cluster: BenchCluster, fleet: Fleet) -> list[str]:
    ids = []
    for pcs, count in fleet.counts.items():
        uid = pcs_uid(cluster.kube, fleet.namespace, pcs)
        ids += [replica_workflow_id(fleet.namespace, pcs, uid, i) for i in range(count)]
    return ids
