"""Timed nudges: whether a nudge brings another round depends on what the history records (when the nudge was sent,
when the last observation began), never on where in a workflow task the signal happened to be applied.

Seen in a seeded fault run (round 52, seed 1): after a Temporal restart and a worker kill, one worker applied a
nudge at a different point of the loop than a later replay did, and the replica workflow failed with a
nondeterminism error ("Timer machine does not handle this event: ActivityTaskScheduled").
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle

from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, pcs_manifest
from workflows.contract import NUDGE_SIGNAL
from workflows.messages import Nudge, Phase
from workflows.nudges import TIMED_NUDGES_PATCH


async def _observes(handle: WorkflowHandle) -> int:  # type: ignore[type-arg]
    history = await handle.fetch_history()
    return sum(1 for e in history.events
               if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and e.activity_task_scheduled_event_attributes.activity_type.name == "observe_replica")


async def _quiet(handle: WorkflowHandle, seconds: float = 3.0) -> int:  # type: ignore[type-arg]
    """The observe count once it has not changed for `seconds`."""
    last, since = await _observes(handle), asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - since < seconds:
        await asyncio.sleep(0.5)
        now = await _observes(handle)
        if now != last:
            last, since = now, asyncio.get_running_loop().time()
    return last


async def test_a_nudge_sent_before_the_last_observation_began_brings_no_round_and_a_later_one_does(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("nudged", cluster.namespace, cliques=[clique("app", 1, 1)]))
    await Replica(temporal_client, cluster, "nudged").wait_phase(Phase.AVAILABLE, timeout=60)
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("nudged", 0))
    history = await handle.fetch_history()
    markers = [e.marker_recorded_event_attributes for e in history.events
               if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED]
    assert any(TIMED_NUDGES_PATCH.encode() in m.SerializeToString() for m in markers), \
        "a new workflow takes the timed-nudges path"

    before = await _quiet(handle)
    await handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC) - timedelta(hours=1)))
    assert await _quiet(handle) == before, "a nudge older than the last observation is already covered"

    await handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
    after = await _quiet(handle)
    assert after == before + 1, f"one round for a fresh nudge: {before} -> {after}"

    await handle.signal(NUDGE_SIGNAL)  # untimed (an older sender): always one more round
    assert await _quiet(handle) == after + 1
