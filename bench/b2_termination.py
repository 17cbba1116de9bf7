"""B2 termination accuracy: how late after its deadline a breached replica is gang-terminated (never early).

One PCS of `replicas` replicas (one clique of one pod, terminationDelay `delay`) settles; then one pod per
replica is made NotReady (its readiness probe fails, as KWOK reports it), `spacing` seconds apart. Each replica
breaches, its workflow sets a durable timer for breach start + delay and, when it fires, deletes the PodClique.

Per breach:
- late_observed: the PodClique's deletion seen by the benchmark's watch − the deadline (due_at) the workflow
  recorded. Arrival at a watcher is after the delete itself, so this errs late, never early.
- late_recorded: the workflow's own termination record `at` (workflow time once the deletes returned) − deadline.
- deletionTimestamp (server, whole seconds) ≥ the deadline truncated to the second: checked for every breach.
- breach_noticed: the pod seen NotReady → the breach start the workflow recorded (what the timer counts from).
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from temporalio.client import WorkflowHandle

from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer
from bench.stats import summary
from bench.workload import (
    SMALL_CLIQUE,
    create,
    fail_readiness,
    live_pods,
    pcs_uid,
    small_pod,
    small_shape,
    wait_settled,
)
from grove import names
from workflows.contract import STATUS_QUERY, replica_workflow_id
from workflows.messages import ReplicaStatus, TerminationRecord

PCS = "b2"


async def run(clusters: Clusters, *, replicas: int = 20, delay: float = 5.0, spacing: float = 0.25,
              timeout: float = 300.0) -> dict[str, Any]:
    async with clusters.cluster(pods=2 * replicas) as cluster:
        return await _run(cluster, replicas, delay, spacing, timeout)


async def _run(cluster: BenchCluster, replicas: int, delay: float, spacing: float,
               timeout: float) -> dict[str, Any]:
    namespace = cluster.namespace("b2")
    cluster.worker(namespace).wait_ready()
    with Observer(cluster.kube, [namespace]) as observer:
        create(cluster.kube, small_shape(PCS, namespace, replicas, termination_delay=f"{delay:g}s"))
        await asyncio.to_thread(wait_settled, observer, namespace, replicas, timeout)
        originals = {t.name: t for t in observer.select("PodClique", namespace) if t.gone_at is None}
        pods = {t.name: t for t in live_pods(observer, namespace)}
        broke: dict[int, float] = {}
        for index in range(replicas):
            broke[index] = time.time()
            fail_readiness(cluster.kube, namespace, small_pod(PCS, index))
            await asyncio.sleep(spacing)
        await asyncio.to_thread(
            observer.wait, lambda: all(t.first(lambda s: s["deleting"]) for t in originals.values()),
            timeout + delay, f"{replicas} PodCliques deleted")
    uid = pcs_uid(cluster.kube, namespace, PCS)
    late_observed, late_recorded, noticed, early_server = [], [], [], 0
    for index in range(replicas):
        handle = cluster.client.get_workflow_handle(replica_workflow_id(namespace, PCS, uid, index))
        record = await _first_termination(handle, timeout)
        deadline = record.deadline.timestamp()
        pclq = originals[names.pclq_name(PCS, index, SMALL_CLIQUE)]
        deleted_seen = pclq.first(lambda s: s["deleting"])
        assert deleted_seen is not None
        late_observed.append(deleted_seen - deadline)
        late_recorded.append(record.at.timestamp() - deadline)
        server = next(s["deletion_timestamp"] for _, s in pclq.history if s["deletion_timestamp"])
        if _parse(server) < int(deadline):
            early_server += 1
        pod = pods[small_pod(PCS, index)]
        not_ready = pod.first(lambda s: not s["ready"], after=broke[index])
        if record.breach_start is not None and not_ready is not None:
            noticed.append(record.breach_start.timestamp() - not_ready)
    observed = summary(late_observed)
    return {
        "breaches": replicas,
        "termination_delay_s": delay,
        "late_observed_s": observed,
        "late_recorded_s": summary(late_recorded),
        "breach_noticed_after_pod_notready_s": summary(noticed),
        "early": {"observed": sum(1 for x in late_observed if x < 0),
                  "recorded": sum(1 for x in late_recorded if x < 0),
                  "server_deletion_timestamp": early_server},
        "targets": {"never_early": min(late_observed) >= 0 and min(late_recorded) >= 0 and not early_server,
                    "p99_le_1s_late": observed["p99"] <= 1.0},
    }


async def _first_termination(handle: WorkflowHandle[Any, Any], timeout: float) -> TerminationRecord:
    """The replica's first termination record (the deletes may be seen before the activity has returned)."""
    deadline = time.monotonic() + timeout
    while True:
        status: ReplicaStatus = await handle.query(STATUS_QUERY, result_type=ReplicaStatus)
        if status.terminations:
            return status.terminations[0]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{handle.id}: no termination recorded")
        await asyncio.sleep(0.2)


def _parse(rfc3339: str) -> int:
    return int(datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp())
