"""Outage: how soon after kube-apiserver answers again the terminations that fell due while it was down are carried
out, against a direct client's floor measured in the same run.

One PCS of `replicas` replicas (one clique of one pod, terminationDelay `delay`) settles; one pod of every replica is
made NotReady; once every replica's workflow shows its deadline, kube-apiserver is stopped, and started again `down`
seconds after the last deadline. A poller (every 50 ms) notes the moment /readyz first answers again ("answered"; or
the floor's first delete, if that came first).

- product: each replica's termination record `at` (the activity's clock once its deletes returned) − answered.
- floor: the same number of ConfigMaps, deleted by a client with no Temporal that tries each again every 100 ms from
  before kube-apiserver starts: the moment its delete of each returned − answered. It is the least any client could
  do: it needs no read, no decision and no workflow task.

Stops kube-apiserver, so it runs on a stack of its own (the command's default), never on a borrowed one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from activities.kubeapi import Kube, KubeError, Resource
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer
from bench.stats import summary
from bench.workload import create, fail_readiness, pcs_uid, small_pod, small_shape, wait_settled
from workflows.contract import STATUS_QUERY, replica_workflow_id
from workflows.messages import ReplicaStatus

PCS = "outage"
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
POLL_S = 0.05
FLOOR_RETRY_S = 0.1


async def run(clusters: Clusters, *, replicas: int = 10, delay: float = 5.0, down: float = 18.0,
              timeout: float = 300.0) -> dict[str, Any]:
    if clusters.stack is not None:
        raise ValueError("bench outage stops kube-apiserver: it runs on a stack of its own, not a borrowed one")
    async with clusters.cluster(pods=2 * replicas) as cluster:
        return await _run(cluster, replicas, delay, down, timeout)


async def _run(cluster: BenchCluster, replicas: int, delay: float, down: float, timeout: float) -> dict[str, Any]:
    namespace, floor_namespace = cluster.namespace("outage"), cluster.namespace("outage-floor")
    cluster.worker(namespace).wait_ready()
    floor_objects = [f"floor-{index}" for index in range(replicas)]
    for name in floor_objects:
        cluster.kube.create(CONFIGMAPS, floor_namespace, {"metadata": {"name": name}})
    with Observer(cluster.kube, [namespace]) as observer:
        create(cluster.kube, small_shape(PCS, namespace, replicas, termination_delay=f"{delay:g}s"))
        await asyncio.to_thread(wait_settled, observer, namespace, replicas, timeout)
    uid = pcs_uid(cluster.kube, namespace, PCS)
    handles = [cluster.client.get_workflow_handle(replica_workflow_id(namespace, PCS, uid, index))
               for index in range(replicas)]
    for index in range(replicas):
        fail_readiness(cluster.kube, namespace, small_pod(PCS, index))
    due = [s.deadlines[0].due_at.timestamp()  # each replica's earliest pending deadline
           for s in await _every_status(handles, lambda s: bool(s.deadlines), "shows its deadline", timeout)]
    stopped = time.time()
    cluster.stack.stop_component("kube-apiserver")
    late_at_stop = sum(1 for at in due if at <= stopped)  # fell due before the outage began: not measured
    await asyncio.sleep(max(0.0, max(due) + down - time.time()))
    floor = FloorDeleter(Kube(cluster.stack.kube_client(), timeout=(1.0, 2.0)), floor_namespace, floor_objects)
    answered = Answered(cluster.kube)
    floor.start()
    answered.start()
    await asyncio.to_thread(cluster.stack.start_component, "kube-apiserver")
    records = [s.terminations[0].at.timestamp()  # each replica's first termination record
               for s in await _every_status(handles, lambda s: bool(s.terminations), "was terminated", timeout)]
    floor.join(timeout)
    answered.join(timeout)
    assert answered.at is not None, "kube-apiserver never answered /readyz again"
    # It may serve a request a moment before /readyz says so: the first answer of either counts.
    answered.at = min(answered.at, *floor.done.values())
    product = [record - answered.at for record, deadline in zip(records, due, strict=True) if deadline > stopped]
    floor_after = [at - answered.at for at in floor.done.values()]
    product_s, floor_s = summary(product), summary(floor_after)
    return {
        "replicas": replicas,
        "termination_delay_s": delay,
        "down_after_last_deadline_s": down,
        "outage_s": round(answered.at - stopped, 2),
        "answered_at": round(answered.at, 3),  # epoch seconds: to set beside the worker's log
        "due_before_the_outage": late_at_stop,
        "after_answered_s": product_s,
        "floor_after_answered_s": floor_s,
        # A difference, not a ratio: the floor is a few hundredths of a second, or none at all.
        "over_floor_p50_s": round(product_s["p50"] - floor_s["p50"], 3) if product_s.get("n") and floor_s.get("n")
        else None,
        "notes": ["after_answered_s: the workflow's termination record − the first /readyz answer after the restart; "
                  "floor: a direct client deleting as many ConfigMaps, trying each every 100 ms"],
    }


class Answered(threading.Thread):
    """Polls /readyz every POLL_S until it answers; `at`: when it first did."""

    def __init__(self, kube: Kube) -> None:
        super().__init__(daemon=True)
        self.kube = kube
        self.at: float | None = None

    def run(self) -> None:
        while not self.kube.healthy(timeout=0.5):
            time.sleep(POLL_S)
        self.at = time.time()


class FloorDeleter(threading.Thread):
    """Deletes every named ConfigMap, each tried again every FLOOR_RETRY_S until a delete returns."""

    def __init__(self, kube: Kube, namespace: str, objects: list[str]) -> None:
        super().__init__(daemon=True)
        self.kube, self.namespace, self.objects = kube, namespace, objects
        self.done: dict[str, float] = {}

    def run(self) -> None:
        while len(self.done) < len(self.objects):
            for name in self.objects:
                if name in self.done:
                    continue
                try:
                    self.kube.delete(CONFIGMAPS, self.namespace, name)
                    self.done[name] = time.time()
                except KubeError:
                    break  # not back yet: the whole round again later
            time.sleep(FLOOR_RETRY_S)


async def _every_status(handles: list[Any], has: Callable[[ReplicaStatus], bool], what: str,
                        timeout: float) -> list[ReplicaStatus]:
    """Every replica's status, polled every 0.1 s until `has` holds for all of them."""
    ends = time.monotonic() + timeout
    while True:
        statuses: list[ReplicaStatus] = [await h.query(STATUS_QUERY, result_type=ReplicaStatus) for h in handles]
        if all(has(s) for s in statuses):
            return statuses
        if time.monotonic() > ends:
            raise TimeoutError(f"not every replica {what}")
        await asyncio.sleep(0.1)
