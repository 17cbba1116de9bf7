"""B4 idle cost: what a settled fleet costs per replica per hour when nothing changes, and what a worker costs
on its own.

Measured, each on the same worker, once the fleet has settled (every replica Available and every PCS's status
showing its rollout done, as a full pass judges it):
1. fixed window: no replica at all, `window` seconds — lease renewals, watches, the worker's own upkeep.
2. a reconciler full pass, triggered by its `full_pass` signal (it runs every 10 min; triggering one also
   restarts that clock, so no full pass falls into the next window). Once with no replica, once with N.
3. loaded window: N settled replicas, `window` seconds.
4. a safety-resync round of every replica (each replica looks at its replica again every 6 h even without a
   nudge): the rounds their own timers bring, with the worker's `--replica-resync-seconds` set to `safety_resync`
   so that they come within the run; waited for after the rollout round, and counted per hour at one per 6 h. (It
   was reproduced by nudging every replica once, a nudge without versions: a round that reads kube-apiserver, five
   requests per replica, where the timer's round reads the watch cache.)
5. an idle round of every PCS's rollout workflow (each re-reads its PCS every `rollout_resync`, from the watch
   cache): the rounds their own timers bring. The windows before it end sooner than that timer after the fleet
   settled, so no rollout round falls into them (`rollout_rounds_in_windows` says if one did), and the replicas'
   safety timers fire after it (`safety_rounds_in_windows` says if one did not).
Per hour: window rate × 3600 + 6 full passes + one resync round per 6 h + 3600 / rollout_resync rollout rounds +
the watcher's relists (3 LIST and 3 WATCH requests per 30 min, from the configuration: outside any window here).
Fixed = the same sum with no replica; per replica = (total at N − fixed) / N. Windows are shorter than an hour:
rates are extrapolated. History events count the reconciler's, the replicas' and the rollout workflows'.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.api.history.v1 import HistoryEvent

from activities.kubeapi import PODCLIQUESETS
from activities.reconcile import checked_spec, rollout_settled
from bench import replicas
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer
from bench.sampling import Delta, Reading, history_lengths, wait_quiet
from bench.workload import pcs_uid
from localstack.workerproc import WorkerProcess
from workflows.contract import (
    OBSERVE_ROLLOUT_CACHED,
    reconciler_workflow_id,
    rollout_workflow_id,
)

FULL_PASSES_PER_HOUR = 6  # WorkerSettings.reconcile_every = 10 min
RESYNCS_PER_HOUR = 1 / 6  # WorkerSettings.replica_safety_resync = 6 h
SWEEP = "sweep_replica_workflows"
# The replicas' safety timers are armed as the fleet settles and the rollout workflows' idle timers about then too;
# this much later than the rollout round's, the safety round falls after it.
SAFETY_MARGIN_S = 30.0
RELIST_REQUESTS_PER_HOUR = 12  # 3 feeds × (LIST + WATCH) per WorkerSettings.watch_resync = 30 min


async def run(clusters: Clusters, *, replicas: int = 200, window: float = 300.0, per_pcs: int = 10,
              rollout_resync: float = 600.0, safety_resync: float = 900.0, timeout: float = 1200.0) -> dict[str, Any]:
    if safety_resync < max(window, rollout_resync) + SAFETY_MARGIN_S:
        raise ValueError(f"--safety-resync ({safety_resync:g} s) must be at least {SAFETY_MARGIN_S:g} s more than "
                         f"--window and --rollout-resync: the replicas' safety rounds come after the other windows")
    async with clusters.cluster(pods=replicas) as cluster:
        return await _run(cluster, replicas, window, per_pcs, rollout_resync, safety_resync, timeout)


async def _rollouts_settled(cluster: BenchCluster, namespace: str, names: list[str], timeout: float) -> float:
    """Until every PCS's status shows its rollout done (what a full pass checks): a rollout workflow mirrors
    updatedReplicas once the leader wakes it (every replica available) or at its 30 s active resync, and a fleet is
    not settled before. Returns the seconds waited."""

    def settled(name: str) -> bool:
        obj = cluster.kube.get(PODCLIQUESETS, namespace, name) or {}
        return rollout_settled(obj, checked_spec(obj)[0])

    began = time.monotonic()
    while not all(settled(n) for n in names):
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"the PodCliqueSets' status did not show their rollouts done within {timeout:.0f}s")
        await asyncio.sleep(1.0)
    return round(time.monotonic() - began, 1)


async def _per_workflow(cluster: BenchCluster, workflows: list[str],
                        count: Callable[[list[HistoryEvent]], int]) -> dict[str, int]:
    """Workflow -> `count` of its current run's history so far."""
    found: dict[str, int] = {}
    for workflow_id in workflows:
        found[workflow_id] = count(list((await cluster.client.get_workflow_handle(workflow_id).fetch_history()).events))
    return found


async def _signals(cluster: BenchCluster, workflows: list[str]) -> int:
    """Signals these workflows' current runs have received so far."""
    counts = await _per_workflow(cluster, workflows, lambda events: sum(
        1 for e in events if e.HasField("workflow_execution_signaled_event_attributes")))
    return sum(counts.values())


def _cached_rounds(events: list[HistoryEvent]) -> int:
    """A rollout workflow's idle rounds: observe_rollout_cached activities completed."""
    cached = {e.event_id for e in events if e.HasField("activity_task_scheduled_event_attributes")
              and e.activity_task_scheduled_event_attributes.activity_type.name == OBSERVE_ROLLOUT_CACHED}
    return sum(1 for e in events if e.HasField("activity_task_completed_event_attributes")
               and e.activity_task_completed_event_attributes.scheduled_event_id in cached)


async def _cached_rollout_rounds(cluster: BenchCluster, rollouts: list[str]) -> dict[str, int]:
    """Rollout workflow -> its idle rounds so far."""
    return await _per_workflow(cluster, rollouts, _cached_rounds)


async def _timers_fired(cluster: BenchCluster, workflows: list[str]) -> dict[str, int]:
    """Workflow -> timers fired in its current run so far: in a settled fleet, only its safety-resync timer."""
    return await _per_workflow(cluster, workflows,
                               lambda events: sum(1 for e in events if e.HasField("timer_fired_event_attributes")))


async def _each_once_more(count: Callable[[], Awaitable[dict[str, int]]], within: float, what: str) -> None:
    """Until every workflow's count (rounds, timers fired) has grown by one since the call."""
    start = await count()
    deadline = asyncio.get_running_loop().time() + within
    while any(n <= start[w] for w, n in (await count()).items()):
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"not every workflow had a {what} within {within:.0f}s")
        await asyncio.sleep(2.0)


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
              rollout_round: dict[str, float] | None, rollout_rounds_per_hour: float,
              idle_cpu_rate: float) -> dict[str, float]:
    def triggered(measured: dict[str, float], key: str) -> float:
        """What the trigger set off, less the idle CPU the worker burns meanwhile anyway."""
        return max(measured[key] - (idle_cpu_rate * measured["seconds"] if key == "cpu_seconds" else 0), 0.0)

    hourly: dict[str, float] = {}
    for key in ("kube_requests", "history_events", "cpu_seconds"):
        value = window[key] / window["seconds"] * 3600 + FULL_PASSES_PER_HOUR * triggered(full_pass, key)
        if resync is not None:
            value += RESYNCS_PER_HOUR * triggered(resync, key)
        if rollout_round is not None:
            value += rollout_rounds_per_hour * triggered(rollout_round, key)
        hourly[key] = value
    hourly["kube_requests"] += RELIST_REQUESTS_PER_HOUR
    return hourly


async def _run(cluster: BenchCluster, n: int, window: float, per_pcs: int, rollout_resync: float,
               safety_resync: float, timeout: float) -> dict[str, Any]:
    namespace = cluster.namespace("b4")
    worker = cluster.worker(namespace, extra_args=["--rollout-resync-seconds", f"{rollout_resync:g}",
                                                   "--replica-resync-seconds", f"{safety_resync:g}"])
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
    rollouts_settled_s = await _rollouts_settled(cluster, namespace, list(fleet.counts), timeout)
    await wait_quiet(worker, timeout=timeout)
    ids = replicas.workflow_ids(cluster, fleet)
    rollouts = [rollout_workflow_id(namespace, pcs, pcs_uid(cluster.kube, namespace, pcs))
                for pcs in fleet.counts]
    every = [reconciler, *ids, *rollouts]

    rounds_before = await _cached_rollout_rounds(cluster, rollouts)
    fired_before = await _timers_fired(cluster, ids)

    async def safety_rounds() -> None:
        """Until every replica's safety-resync timer has fired once more (its round follows: `_measure` waits for
        the worker to be quiet)."""
        await _each_once_more(lambda: _timers_fired(cluster, ids), safety_resync + 120, "safety-resync round")

    async def rollout_rounds() -> None:
        """Until every rollout workflow has had one more idle round (its own timer's)."""
        await _each_once_more(lambda: _cached_rollout_rounds(cluster, rollouts), rollout_resync + 120, "idle round")

    signals_before = await _signals(cluster, rollouts)
    full_pass_loaded = await _measure(cluster, worker, every, None, full_pass)
    rollouts_woken = await _signals(cluster, rollouts) - signals_before
    loaded_window = await _measure(cluster, worker, every, window)
    rounds_in_windows = sum((await _cached_rollout_rounds(cluster, rollouts)).values()) - sum(rounds_before.values())
    rollout_round = await _measure(cluster, worker, rollouts, None, rollout_rounds)
    safety_in_windows = sum((await _timers_fired(cluster, ids)).values()) - sum(fired_before.values())
    resync = await _measure(cluster, worker, ids, None, safety_rounds)
    idle_cpu_rate = fixed_window["cpu_seconds"] / fixed_window["seconds"]
    fixed = _per_hour(fixed_window, full_pass_empty, None, None, 0.0, idle_cpu_rate)
    total = _per_hour(loaded_window, full_pass_loaded, resync, rollout_round, 3600 / rollout_resync, idle_cpu_rate)
    per_replica = {k: (total[k] - fixed[k]) / n for k in total}
    return {
        "replicas": n,
        "window_s": window,
        "per_replica_per_hour": {k: round(v, 3) for k, v in per_replica.items()},
        "fixed_per_worker_per_hour": {k: round(v, 1) for k, v in fixed.items()},
        "total_per_hour": {k: round(v, 1) for k, v in total.items()},
        "measured": {"fixed_window": fixed_window, "loaded_window": loaded_window,
                     "full_pass_no_replicas": full_pass_empty, "full_pass_loaded": full_pass_loaded,
                     "resync_round_all_replicas": resync, "idle_round_all_rollouts": rollout_round},
        "rollout_workflows": len(rollouts),
        "rollouts_settled_after_fleet_s": rollouts_settled_s,
        "rollout_resync_s": rollout_resync,
        "rollout_rounds_in_windows": rounds_in_windows,
        "safety_resync_s": safety_resync,
        "safety_rounds_in_windows": safety_in_windows,
        "rollouts_woken_by_full_pass": rollouts_woken,
        "targets": {"le_1_request_per_replica_hour": per_replica["kube_requests"] <= 1.0,
                    "le_150_history_events_per_replica_hour": per_replica["history_events"] <= 150},
    }
