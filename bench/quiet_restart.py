"""A worker restarted with nothing changed (a `helm upgrade` of the workers, a node drained): what the new worker
does before it is quiet again.

Measured twice on the same settled fleet, one after the other, each a SIGKILL and a start:
- `watermark_removed`: the Lease's nudge watermark (worker/watermark.py) is taken off between the kill and the
  start, so the new worker knows nothing of what its predecessor delivered and nudges every replica its first lists
  find (what every restart did before the watermark). This is the comparison, measured in the same run.
- `watermark_kept`: as a restart is, once the leader has recorded that it nudged every change (checked from the
  Lease and the objects before the kill, and reported).

For each: the first lists' verdict (the new worker's /metrics), the nudges it sent, the workflow tasks it polled and the
replays among them (SDK counters: a task without the workflow in its cache replays the whole run), the history
events added per replica, the new worker's CPU from its start and the stack's, and when it was quiet again.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from activities.kubeapi import LEASES, PODCLIQUES, PODCLIQUESETS, PODS
from bench import interrupt, procs, promtext
from bench.cluster import BenchCluster
from bench.promtext import FIRST_LIST_REPLICAS, NUDGES
from bench.sampling import history_lengths, wait_quiet
from bench.stats import summary
from localstack.workerproc import WorkerProcess
from worker import watermark

SDK_TASKS = "temporal_workflow_task_queue_poll_succeed_total"  # workflow tasks this worker polled
SDK_REPLAYS = "temporal_workflow_task_replay_latency_seconds_count"  # workflows it replayed (none in its cache)
SETTLED_QUIET_SECONDS = 5.0


def watcher_lease(worker: WorkerProcess) -> tuple[str, str]:
    """(namespace, name) of the Lease the worker's watcher campaigns for (worker/config.py, scoped to its namespace)."""
    return worker.namespace, f"grove-temporal-watcher-{worker.namespace}"


async def measure(cluster: BenchCluster, worker: WorkerProcess, workflow_ids: list[str],
                  timeout: float) -> dict[str, Any]:
    return {name: await _restart(cluster, worker, workflow_ids, keep, timeout)
            for name, keep in (("watermark_removed", False), ("watermark_kept", True))}


async def _restart(cluster: BenchCluster, worker: WorkerProcess, workflow_ids: list[str], keep: bool,
                   timeout: float) -> dict[str, Any]:
    await wait_quiet(worker, timeout=timeout)
    covered = await asyncio.to_thread(_wait_covered, cluster, worker, 30.0) if keep else None
    before = await history_lengths(cluster.client, workflow_ids)
    stack_cpu = cluster.stack_cpu()
    killed = time.time()
    worker.kill()
    if not keep:
        namespace, name = watcher_lease(worker)
        cluster.kube.patch(LEASES, namespace, name, {"metadata": {"annotations": {watermark.ANNOTATION: None}}})
    worker.start()
    await asyncio.to_thread(worker.wait_ready, timeout)
    verdict = await asyncio.to_thread(_first_lists, worker, len(workflow_ids))
    settled = await asyncio.to_thread(_settled, worker, min(timeout, 300.0))
    worker_cpu = procs.sample(worker.pid).cpu_seconds
    stack_cpu = cluster.stack_cpu_since(stack_cpu)
    counters = promtext.scrape(worker.http_port)
    after = await history_lengths(cluster.client, workflow_ids)
    return {
        **({"watermark_covered_the_fleet_at_kill": covered} if keep else {}),
        "first_lists": verdict,
        "nudges_sent": int(counters.total(NUDGES, outcome="sent")),
        "workflow_tasks": int(counters.total(SDK_TASKS)),
        "replays": int(counters.total(SDK_REPLAYS)),
        "history_events_added": summary([float(after[w] - before[w]) for w in after if w in before], 1),
        "quiet_after_kill_s": round(settled - killed, 2),
        "new_worker_cpu_s": round(worker_cpu, 1),  # from its start: imports, first lists, and the nudges' rounds
        "stack_cpu_s": stack_cpu,
    }


def _wait_covered(cluster: BenchCluster, worker: WorkerProcess, patience: float) -> bool:
    """Until the Lease's watermark is at or past every object of the fleet (the leader records it with a renewal, a
    few seconds after it last nudged); False if that did not happen within `patience` (reported, not fatal)."""
    deadline = time.monotonic() + patience
    namespace, name = watcher_lease(worker)
    while True:
        newest = {resource.kind: max((int(obj["metadata"]["resourceVersion"])
                                      for obj in cluster.kube.list_items(resource, worker.namespace)), default=0)
                  for resource in (PODS, PODCLIQUES, PODCLIQUESETS)}
        if watermark.covers(watermark.read(cluster.kube.get(LEASES, namespace, name)), newest):
            return True
        if time.monotonic() >= deadline:
            return False
        interrupt.pause(1.0)


def _first_lists(worker: WorkerProcess, replicas: int, patience: float = 120.0) -> dict[str, int]:
    """The new worker's verdict on its first lists (its /metrics), once it covers every replica of the fleet."""
    deadline = time.monotonic() + patience
    while True:
        verdict = {outcome: int(count) for outcome, count in
                   promtext.scrape(worker.http_port).by(FIRST_LIST_REPLICAS, "outcome").items()}
        if sum(verdict.values()) >= replicas:
            return {"nudged_with_versions": verdict.get("versions", 0), "nudged_for_a_read": verdict.get("read", 0),
                    "not_nudged": verdict.get("unchanged", 0)}
        if time.monotonic() >= deadline:
            raise TimeoutError(f"the restarted worker's first lists covered {verdict} of {replicas} replicas within "
                               f"{patience:.0f}s; log: {worker.log_path}")
        interrupt.pause(0.25)


def _settled(worker: WorkerProcess, timeout: float) -> float:
    """When the new worker last sent a nudge or polled a workflow task, once neither has moved for a while."""
    deadline = time.monotonic() + timeout
    last: tuple[float, float] | None = None
    changed = time.time()
    while time.monotonic() < deadline:
        counters = promtext.scrape(worker.http_port)
        now = (counters.total(NUDGES), counters.total(SDK_TASKS))
        if now != last:
            last, changed = now, time.time()
        elif time.time() - changed >= SETTLED_QUIET_SECONDS:
            return changed
        interrupt.pause(0.5)
    raise TimeoutError(f"the restarted worker never went quiet within {timeout:.0f}s")
