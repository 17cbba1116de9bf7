"""B4 idle cost: what a settled fleet costs per replica per hour when nothing changes, and what a worker costs
on its own.

Measured, each on the same worker:
1. fixed window: no replica at all, `window` seconds — lease renewals, watches, the worker's own upkeep.
2. a reconciler full pass, triggered by its `full_pass` signal (it runs every 10 min; triggering one also
   restarts that clock, so no full pass falls into the next window). Once with no replica, once with N.
3. loaded window: N settled replicas, `window` seconds.
4. a safety-resync round of every replica (each replica re-reads the cluster every 6 h even without a nudge),
   reproduced by nudging every replica once: the same observe round, plus a signal event instead of a timer's.
Per hour: window rate × 3600 + 6 full passes + one resync round per 6 h + the watcher's relists (3 LIST and 3
WATCH requests per 30 min, from the configuration: outside any window here). Fixed = the same sum with no
replica; per replica = (total at N − fixed) / N. Windows are shorter than an hour: rates are extrapolated.
"""

from __future__ import annotations

import asyncio
from typing import Any

from bench import replicas
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer
from bench.sampling import Delta, Reading, history_lengths, wait_quiet
from localstack.workerproc import WorkerProcess
from workflows.contract import NUDGE_SIGNAL, reconciler_workflow_id

FULL_PASSES_PER_HOUR = 6  # WorkerSettings.reconcile_every = 10 min
RESYNCS_PER_HOUR = 1 / 6  # WorkerSettings.replica_safety_resync = 6 h
SWEEP = "sweep_replica_workflows"
RELIST_REQUESTS_PER_HOUR = 12  # 3 feeds × (LIST + WATCH) per WorkerSettings.watch_resync = 30 min


async def run(clusters: Clusters, *, replicas: int = 200, window: float = 300.0, per_pcs: int = 10,
              timeout: float = 1200.0) -> dict[str, Any]:
    async with clusters.cluster(pods=replicas) as cluster:
        return await _run(cluster, replicas, window, per_pcs, timeout)


async def _measure(cluster: BenchCluster, worker: WorkerProcess, workflows: list[str], seconds: float | None,
                   trigger: Any = None) -> dict[str, float]:
    """A window of `seconds`, or what `trigger()` sets off until the worker is quiet again (background excluded)."""
    lengths = await history_lengths(cluster.client, workflows)
    before = Reading.take(worker)
    if trigger is None:
        assert seconds is not None
        await asyncio.sleep(seconds)
    else:
        await trigger()
        await asyncio.sleep(1.0)
        await wait_quiet(worker)
    after = Reading.take(worker)
    grown = await history_lengths(cluster.client, workflows)
    delta = Delta.between(before, after)
    return {
        "seconds": round(delta.seconds, 1),
        "kube_requests": delta.requests(foreground_only=trigger is not None),
        "history_events": float(sum(grown.get(w, 0) - n for w, n in lengths.items())),
        "cpu_seconds": delta.cpu_seconds,
        "by_verb_resource": delta.requests_by_verb_resource(),  # type: ignore[dict-item]
    }


def _per_hour(window: dict[str, float], full_pass: dict[str, float], resync: dict[str, float] | None,
              idle_cpu_rate: float) -> dict[str, float]:
    hourly: dict[str, float] = {}
    for key in ("kube_requests", "history_events", "cpu_seconds"):
        value = window[key] / window["seconds"] * 3600
        # Triggered costs: what the trigger set off, less the idle CPU the worker burns meanwhile anyway.
        fp = full_pass[key] - (idle_cpu_rate * full_pass["seconds"] if key == "cpu_seconds" else 0)
        value += FULL_PASSES_PER_HOUR * max(fp, 0.0)
        if resync is not None:
            rs = resync[key] - (idle_cpu_rate * resync["seconds"] if key == "cpu_seconds" else 0)
            value += RESYNCS_PER_HOUR * max(rs, 0.0)
        hourly[key] = value
    hourly["kube_requests"] += RELIST_REQUESTS_PER_HOUR
    return hourly


async def _run(cluster: BenchCluster, n: int, window: float, per_pcs: int, timeout: float) -> dict[str, Any]:
    namespace = cluster.namespace("b4")
    worker = cluster.worker(namespace)
    worker.wait_ready()
    reconciler = reconciler_workflow_id(namespace)
    handle = cluster.client.get_workflow_handle(reconciler)

    async def full_pass() -> None:
        """Signal a full pass and wait until its last step (the orphan sweep) has completed."""
        seen = len((await handle.fetch_history()).events)
        await handle.signal("full_pass")
        while True:
            events = (await handle.fetch_history()).events[seen:]
            sweeps = {e.event_id for e in events if e.HasField("activity_task_scheduled_event_attributes")
                      and e.activity_task_scheduled_event_attributes.activity_type.name == SWEEP}
            if any(e.HasField("activity_task_completed_event_attributes")
                   and e.activity_task_completed_event_attributes.scheduled_event_id in sweeps for e in events):
                return
            await asyncio.sleep(0.5)

    await wait_quiet(worker, timeout=timeout)
    full_pass_empty = await _measure(cluster, worker, [reconciler], None, full_pass)
    fixed_window = await _measure(cluster, worker, [reconciler], window)
    fleet = replicas.plan(namespace, n, per_pcs)
    with Observer(cluster.kube, [namespace]) as observer:
        replicas.create_all(cluster, fleet)
        await replicas.settle(observer, fleet, timeout)
    await wait_quiet(worker, timeout=timeout)
    ids = replicas.workflow_ids(cluster, fleet)

    async def nudge_all() -> None:
        await asyncio.gather(*(cluster.client.get_workflow_handle(w).signal(NUDGE_SIGNAL) for w in ids))

    full_pass_loaded = await _measure(cluster, worker, [reconciler, *ids], None, full_pass)
    loaded_window = await _measure(cluster, worker, [reconciler, *ids], window)
    resync = await _measure(cluster, worker, ids, None, nudge_all)
    idle_cpu_rate = fixed_window["cpu_seconds"] / fixed_window["seconds"]
    fixed = _per_hour(fixed_window, full_pass_empty, None, idle_cpu_rate)
    total = _per_hour(loaded_window, full_pass_loaded, resync, idle_cpu_rate)
    per_replica = {k: (total[k] - fixed[k]) / n for k in total}
    return {
        "replicas": n,
        "window_s": window,
        "per_replica_per_hour": {k: round(v, 3) for k, v in per_replica.items()},
        "fixed_per_worker_per_hour": {k: round(v, 1) for k, v in fixed.items()},
        "total_per_hour": {k: round(v, 1) for k, v in total.items()},
        "measured": {"fixed_window": fixed_window, "loaded_window": loaded_window,
                     "full_pass_no_replicas": full_pass_empty, "full_pass_loaded": full_pass_loaded,
                     "resync_round_all_replicas": resync},
        "targets": {"le_1_request_per_replica_hour": per_replica["kube_requests"] <= 1.0,
                    "le_150_history_events_per_replica_hour": per_replica["history_events"] <= 150},
    }
