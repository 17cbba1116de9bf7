"""Many replicas at once (B3-B5): PodCliqueSets of `per_pcs` replicas, one clique of one pod each, or (B3 with
`--pods-per-replica 17`) the 17-pod replicas that `bench rollout` uses."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass

from activities.kubeapi import JSON
from bench import rollout
from bench.cluster import BenchCluster
from bench.observer import Observer
from bench.workload import create, live_pods, pcs_uid, small_pod, small_shape, wait_settled
from workflows.contract import replica_workflow_id

SHAPES = (1, 17)  # pods per replica: small_shape, or rollout.shape (4 frontend, 5 decode, 2 x (1 leader, 3 workers))
PCLQS_PER_REPLICA = {1: 1, 17: 6}
BASE_PODS = {1: 1, 17: 13}  # pods in a replica's base gang (17: frontend, decode and PCSG replica 0)


@dataclass(frozen=True)
class Fleet:
    namespace: str
    counts: dict[str, int]  # PCS name -> replicas
    pods_per_replica: int = 1
    termination_delay: str | None = None  # the template's terminationDelay (one-pod shape), e.g. "5s"

    @property
    def replicas(self) -> int:
        return sum(self.counts.values())

    def pods(self) -> list[tuple[str, int, str]]:
        """(pcs, replica index, pod name) of every replica's one pod (the one-pod shape's clique, SMALL_CLIQUE)."""
        return [(pcs, i, small_pod(pcs, i))
                for pcs, n in self.counts.items() for i in range(n)]


def plan(namespace: str, replicas: int, per_pcs: int, pods_per_replica: int = 1,
         termination_delay: str | None = None) -> Fleet:
    if pods_per_replica not in SHAPES:
        raise ValueError(f"--pods-per-replica: one of {', '.join(map(str, SHAPES))}, got {pods_per_replica}")
    counts = {}
    for p in range(math.ceil(replicas / per_pcs)):
        counts[f"s{p:04d}"] = min(per_pcs, replicas - p * per_pcs)
    return Fleet(namespace, counts, pods_per_replica, termination_delay)


def manifest(fleet: Fleet, pcs: str, count: int) -> JSON:
    if fleet.pods_per_replica == 17:
        return rollout.shape(pcs, fleet.namespace, count)
    return small_shape(pcs, fleet.namespace, count, termination_delay=fleet.termination_delay)


def create_all(cluster: BenchCluster, fleet: Fleet) -> list[JSON]:
    return [create(cluster.kube, manifest(fleet, pcs, count)) for pcs, count in fleet.counts.items()]


def all_released(observer: Observer, namespace: str, pods_total: int) -> Callable[[], bool]:
    """A predicate for `observer.wait`: `pods_total` live pods in `namespace`, none of them gated."""
    def released() -> bool:
        pods = live_pods(observer, namespace)
        return len(pods) >= pods_total and all(not p.state["gated"] for p in pods)
    return released


def all_ready(observer: Observer, namespace: str, pods_total: int) -> Callable[[], bool]:
    """A predicate for `observer.wait`: `pods_total` live pods in `namespace`, every one Ready."""
    def ready() -> bool:
        pods = live_pods(observer, namespace)
        return len(pods) >= pods_total and all(p.state["ready"] for p in pods)
    return ready


async def settle(observer: Observer, fleet: Fleet, timeout: float) -> tuple[float, float, float]:
    """Wait until every pod is released, every pod Ready, every PodClique mirrored Ready; returns those moments."""
    ns, n = fleet.namespace, fleet.replicas * fleet.pods_per_replica
    released, ready = all_released(observer, ns, n), all_ready(observer, ns, n)
    t_released = await asyncio.to_thread(observer.wait, released, timeout, f"{n} pods released", 0.25)
    t_ready = await asyncio.to_thread(observer.wait, ready, timeout, f"{n} pods Ready", 0.25)
    pclqs = fleet.replicas * PCLQS_PER_REPLICA[fleet.pods_per_replica]
    t_settled = await asyncio.to_thread(wait_settled, observer, ns, pclqs, timeout)
    return t_released, t_ready, t_settled


def workflow_ids(cluster: BenchCluster, fleet: Fleet) -> list[str]:
    ids = []
    for pcs, count in fleet.counts.items():
        uid = pcs_uid(cluster.kube, fleet.namespace, pcs)
        ids += [replica_workflow_id(fleet.namespace, pcs, uid, i) for i in range(count)]
    return ids
