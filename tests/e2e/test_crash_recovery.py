"""S9: the worker process is SIGKILLed; a new one takes over from the workflow history.

1. During a pending terminationDelay: the termination still happens at the original deadline (never before, at most
   a measured margin after), exactly once.
2. After availability was reached: the was-available memory survives (it lives in the history, not in a status
   bit or in the dead process), so a later breach is still detected and acted on after the delay.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.client import Client, WorkflowExecutionStatus

from activities.kubeapi import LEASES, PODCLIQUES, PODCLIQUESETS, PODS
from faults.history import ENSURES
from tests.e2e.conftest import Histories
from tests.e2e.harness import (
    Cluster,
    Replica,
    Timeline,
    WorkerProcess,
    await_for,
    clique,
    is_ready,
    pcs_manifest,
    wait_for,
)
from worker import watermark
from worker.history_activities import decoded, local_activity
from workflows.contract import (
    ENSURE_REPLICA,
    OBSERVE_REPLICA,
    OBSERVE_REPLICA_CACHED,
    PCS_CHANGED_SIGNAL,
    reconciler_workflow_id,
)
from workflows.messages import EnsureResult, Phase

# The new worker starts a few seconds into the delay; the deadline is well after that, so the test shows the
# timer surviving the crash rather than a timer set by the new process.
DELAY_S = 20
# How late the termination may come after the deadline when the worker that last ran the workflow died. Measured
# 0.2-0.4 s (the server sees the dead worker's sticky queue has no poller and dispatches the timer's workflow task
# to the normal queue at once; then observe + terminate run). 5 s leaves room for a loaded machine while still
# failing a timer that was lost and re-created late, or that waited out the 10 s sticky schedule-to-start timeout.
LATE_MARGIN_S = 5


async def test_a_worker_killed_during_the_delay_terminates_at_the_original_deadline_exactly_once(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    cluster.apply(pcs_manifest("crash", cluster.namespace, termination_delay=f"{DELAY_S}s",
                               cliques=[clique("frontend", 2, 2), clique("api", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    replica = Replica(temporal_client, cluster, "crash")
    await replica.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    cluster.fail_readiness("crash-0-frontend-1")
    deadline = (await replica.wait(lambda s: bool(s.deadlines), what="deadline")).deadlines[0]
    await asyncio.sleep(2)
    worker_process.kill()
    killed_at = datetime.now(UTC)
    await asyncio.sleep(1)
    worker_process.start()
    print(f"\nS9 worker SIGKILLed {(killed_at - deadline.breach_start).total_seconds():.1f}s into a {DELAY_S}s delay, "
          f"new worker started 1s later")

    frontend_uid = before["PodClique/crash-0-frontend"]
    wait_for(lambda: any("deleting" in m for m in timeline.of("PodClique", "crash-0-frontend")),
             timeout=DELAY_S + LATE_MARGIN_S + 10, what="termination after the crash")
    deleting = min(m["deleting"] for m in timeline.of("PodClique", "crash-0-frontend") if "deleting" in m)
    late = deleting - deadline.due_at.timestamp()
    print(f"S9 PodCliques seen deleting {late * 1000:.0f} ms after the original deadline")
    assert late >= 0, "never before the original deadline"
    assert late <= LATE_MARGIN_S, f"{late:.1f}s after the original deadline"

    wait_for(lambda: cluster.live_pclq_uids().get("crash-0-frontend") not in (None, frontend_uid), timeout=90,
             what="replica recreated by the new worker")
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="replica back to Ready")
    await asyncio.sleep(3)  # a duplicate termination (replayed timer, retried activity) would show by now
    status = await replica.status()
    assert status.terminations_total == 1 and status.incarnation == 2
    record = status.terminations[0]
    assert record.deadline == deadline.due_at and record.breach_start == deadline.breach_start
    assert record.at >= deadline.due_at
    print(f"S9 workflow recorded the termination {(record.at - deadline.due_at).total_seconds() * 1000:.0f} ms after "
          "the original deadline")
    assert len(cluster.events("GangTerminated")) == 1, "exactly once"
    await histories.keep(replica.handle, "s9_crash_during_delay")


async def test_was_available_survives_a_worker_crash(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, histories: Histories) -> None:
    delay_s = 4
    cluster.apply(pcs_manifest("sticky", cluster.namespace, termination_delay=f"{delay_s}s",
                               cliques=[clique("frontend", 2, 2), clique("api", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    replica = Replica(temporal_client, cluster, "sticky")
    await replica.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    worker_process.kill()
    worker_process.start()
    restarted = time.monotonic()
    # The new process knows only the history: it must still remember that frontend was available.
    status = await replica.wait(lambda s: bool(s.cliques), timeout=30, what="status from the new worker")
    assert all(c.was_available for c in status.cliques), status.cliques

    broke = datetime.now(UTC)
    cluster.fail_readiness("sticky-0-frontend-1")
    # The new worker's watcher takes over the dead one's lease first (lease duration 15 s on its own clock).
    breached = await replica.wait(lambda s: bool(s.deadlines), timeout=90, what="breach detected by the new worker")
    deadline = breached.deadlines[0]
    print(f"\nS9 breach after a crash detected {time.monotonic() - restarted:.1f}s after the restart "
          "(the new watcher waits out the dead one's lease)")
    frontend = next(c for c in breached.cliques if c.name == "sticky-0-frontend")
    assert (frontend.breached, frontend.reason, frontend.was_available) == ("True", "InsufficientReadyPods", True)
    assert deadline.breach_start >= broke and deadline.delay == timedelta(seconds=delay_s)
    wait_for(lambda: cluster.live_pclq_uids().get("sticky-0-frontend") not in (None, before["PodClique/sticky-0-frontend"]),
             timeout=delay_s + 30, what="terminated after the delay")
    status = await replica.status()
    assert status.terminations_total == 1 and status.terminations[0].at >= deadline.due_at
    print(f"S9 terminated {(status.terminations[0].at - deadline.due_at).total_seconds() * 1000:.0f} ms after the "
          "deadline")
    await histories.keep(replica.handle, "s9_was_available_across_crash")


async def test_a_restarted_worker_reads_its_cache_for_what_changed_and_kube_apiserver_where_something_went_missing(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    """A restarted worker remembers nothing of what its first lists find. A replica the cache shows whole whose items
    changed after the previous leader's nudge watermark (on the Lease) is nudged with their own versions: one whose pod
    went not Ready meanwhile acts on it from the cache, without reading kube-apiserver. One where nothing changed is
    not nudged at all, so the new worker does not even replay it. A replica with a pod deleted meanwhile, which no list
    shows, is nudged for a read from kube-apiserver and gets its pod back. A replica whose workflow was terminated
    while no worker ran, and nothing else changed, gets no nudge to find that out: one visibility query does, and the
    reconciler starts it again."""
    cluster.apply(pcs_manifest("down", cluster.namespace, replicas=3, termination_delay="1h",
                               cliques=[clique("frontend", 2, 2)]))
    cluster.apply(pcs_manifest("lost", cluster.namespace, replicas=1, cliques=[clique("frontend", 1, 1)]))
    wait_for(lambda: cluster.ready_pods(7), timeout=60, what="7 Ready pods")
    replicas = [Replica(temporal_client, cluster, "down", index) for index in range(3)]
    lost = Replica(temporal_client, cluster, "lost", 0)
    for replica in [*replicas, lost]:
        await replica.wait_phase(Phase.AVAILABLE)
    await asyncio.sleep(1)  # every status write of the rounds above has landed
    # ... and the leader has recorded on its Lease that it nudged every change of them (a renewal, within seconds)
    wait_for(lambda: _watermark_covers(cluster, worker_process), timeout=30, what="the Lease's nudge watermark")

    worker_process.kill()
    terminated_run = (await lost.handle.describe()).run_id
    await lost.handle.terminate("the test: a replica workflow gone while no worker runs")
    gone = cluster.pods_of("down-0-frontend")[1]
    cluster.kube.delete(PODS, cluster.namespace, gone["metadata"]["name"])
    wait_for(lambda: all(p["metadata"]["uid"] != gone["metadata"]["uid"] for p in cluster.pods_of("down-0-frontend")),
             timeout=30, what="the pod gone while no worker runs")
    cluster.fail_readiness("down-1-frontend-1")
    wait_for(lambda: not any(is_ready(p) for p in cluster.pods_of("down-1-frontend")
                             if p["metadata"]["name"] == "down-1-frontend-1"), timeout=30, what="KWOK's NotReady")
    # A PodCliqueSet created while no worker runs: its generation is not observed, so the first list hands it to the
    # reconciler; "down", reconciled before the kill, is not handed over again.
    cluster.apply(pcs_manifest("late", cluster.namespace, replicas=1, cliques=[clique("frontend", 1, 1)]))
    down = cluster.pcs("down") or {}
    assert down["status"].get("observedGeneration") == down["metadata"]["generation"], down.get("status")
    restarted_at = datetime.now(UTC)
    worker_process.start()

    # replica 1 acts on its change (a breach, counted down from now) and replica 0 recreates its pod
    breached = await replicas[1].wait(lambda s: bool(s.deadlines), timeout=60, what="replica 1's breach")
    assert breached.deadlines[0].breach_start >= restarted_at - timedelta(seconds=30)
    wait_for(lambda: len([p for p in cluster.pods_of("down-0-frontend") if is_ready(p)]) == 2, timeout=60,
             what="replica 0's pod recreated and Ready")
    log = worker_process.log_path.read_text(errors="replace")
    # replica 1 with its versions; replica 0, and the new PCS's replica (nothing of it exists yet) for a read; replica
    # 2 and lost-0 not at all
    assert ("first lists: 1 replica(s) nudged with their items' versions (whole in the cache), 2 for a read from "
            "kube-apiserver, 2 not nudged (whole, and unchanged since the previous leader's watermark)") in log, \
        log[-5000:]
    assert "first lists: 1 replica(s) left alone have no running workflow; told the reconciler" in log, log[-5000:]

    async def lost_runs_again() -> bool:
        described = await lost.handle.describe()
        return described.status == WorkflowExecutionStatus.RUNNING and described.run_id != terminated_run

    await await_for(lost_runs_again, timeout=60, interval=0.5, what="lost-0's workflow started again")
    await Replica(temporal_client, cluster, "late", 0).wait_phase(Phase.AVAILABLE)
    told = await _pcs_changes_since(temporal_client.get_workflow_handle(reconciler_workflow_id(cluster.namespace)),
                                    restarted_at)
    assert {"late", "lost"} <= told and "down" not in told, told

    reads = {index: await _reads_since(replica.handle, restarted_at) for index, replica in enumerate(replicas)}
    assert reads[0]["apiserver"] >= 1, reads  # the deleted pod: only kube-apiserver can show it gone
    assert reads[1]["apiserver"] == 0 and reads[1]["cache"] >= 1, reads
    # Nothing changed: no nudge, no round, not even a workflow task on the new worker
    assert reads[2] == {"apiserver": 0, "cache": 0}, reads
    assert await _signals_since(replicas[2].handle, restarted_at) == [], "replica 2 was nudged"


def _watermark_covers(cluster: Cluster, worker: WorkerProcess) -> bool:
    """The nudge watermark on the watcher's Lease is at or past every pod, PodClique and PodCliqueSet of the test."""
    mark = watermark.read(cluster.kube.get(LEASES, worker.namespace, f"grove-temporal-watcher-{worker.namespace}"))
    newest = {resource.kind: max((int(obj["metadata"]["resourceVersion"])
                                  for obj in cluster.kube.list_items(resource, cluster.namespace)), default=0)
              for resource in (PODS, PODCLIQUES, PODCLIQUESETS)}
    return watermark.covers(mark, newest)


async def _signals_since(handle: Any, since: datetime) -> list[str]:
    names = []
    async for event in handle.fetch_history_events():
        if (event.event_time.ToDatetime().replace(tzinfo=UTC) >= since
                and event.HasField("workflow_execution_signaled_event_attributes")):
            names.append(event.workflow_execution_signaled_event_attributes.signal_name)
    return names


async def _pcs_changes_since(handle: Any, since: datetime) -> set[str]:
    """The PodCliqueSets the reconciler was told of (its pcs_changed signals) after `since`."""
    told: set[str] = set()
    async for event in handle.fetch_history_events():
        attributes = event.workflow_execution_signaled_event_attributes
        if (event.event_time.ToDatetime().replace(tzinfo=UTC) >= since
                and event.HasField("workflow_execution_signaled_event_attributes")
                and attributes.signal_name == PCS_CHANGED_SIGNAL):
            told.update(name for _, name in json.loads(attributes.input.payloads[0].data))
    return told


async def _reads_since(handle: Any, since: datetime) -> dict[str, int]:
    """The replica's reads recorded after `since`: activities that read kube-apiserver, local ones of the cache."""
    found = {"apiserver": 0, "cache": 0}
    async for event in handle.fetch_history_events():
        if event.event_time.ToDatetime().replace(tzinfo=UTC) < since:
            continue
        if event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            found["apiserver"] += name in (OBSERVE_REPLICA, ENSURE_REPLICA)
        elif (local := local_activity(event)) is not None:
            found["cache"] += local.name == OBSERVE_REPLICA_CACHED
            if local.name in ENSURES and local.result is not None:  # materialising, a local activity since local-ensure
                found["apiserver"] += not decoded(local.result, EnsureResult).snapshot.from_cache
    return found
