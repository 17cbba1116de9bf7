"""The patch baseline in a run's input (workflows/patches.py): a run begun under it records no patch marker and no
TemporalChangeVersion upsert, takes every patch of the baseline, and replays; a run begun without it (by an earlier
release's starter) records the baseline marker as before, and the run it continues as is begun under the number; a
number this release does not know fails the workflow task, not the workflow. Against a real Temporal dev server."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter

from localstack.temporal import TemporalDevServer
from tests.e2e.harness import await_for
from tests.histories import replayer
from tests.workflows.test_replica_workflow import ScriptedCluster, _pcs, _run, _until
from worker.history_activities import PATCH_MARKER, local_activity, patches_in
from workflows import contract, nudge_versions, nudges, replica, replica_rollout, signals
from workflows.messages import Nudge, Phase, ReplicaInput
from workflows.nudge_versions import NudgeVersionsInterceptor
from workflows.patches import INPUT_BASELINE_14, INPUT_BASELINE_15, NEWEST_INPUT_BASELINE
from workflows.replica import RECORDED_BASELINES, REPLICA_BASELINE_13, REPLICA_BASELINES

CHANGE_VERSION = "TemporalChangeVersion"


def _patch_markers(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events if e.marker_recorded_event_attributes.marker_name == PATCH_MARKER)


def _change_version_upserts(history: WorkflowHistory) -> int:
    return sum(1 for e in history.events
               if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
               and CHANGE_VERSION in e.upsert_workflow_search_attributes_event_attributes.search_attributes
               .indexed_fields)


async def test_a_run_begun_under_the_input_baseline_records_no_patch_marker_and_replays(client: Client) -> None:
    cluster = ScriptedCluster(_pcs("unmarked"))
    worker, handle = await _run(client, cluster, baseline=NEWEST_INPUT_BASELINE)
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        history = await client.get_workflow_handle(handle.id, run_id=handle.result_run_id).fetch_history()
    assert _patch_markers(history) == 0, "no marker of its own for the baseline or any patch it covers"
    assert _change_version_upserts(history) == 0
    assert patches_in(list(history.events)) >= REPLICA_BASELINE_13, "every patch of the baseline, read from the input"
    await replayer().replay_workflow(history)  # raises on nondeterminism
    await replayer(sandboxed=False).replay_workflow(history)


async def test_a_run_begun_without_a_number_keeps_its_marker_and_hands_over_under_the_number(client: Client) -> None:
    """As runs begun by an earlier release's reconciler: the baseline marker decides, and replays as before; the run
    it continues as is begun by this release, under its newest baseline."""
    cluster = ScriptedCluster(_pcs("marked"))
    worker, handle = await _run(client, cluster, history_event_limit=1)
    async with worker:
        await _until(handle, lambda s: s.runs >= 2)
        await handle.terminate("test over")
    first = await client.get_workflow_handle(handle.id, run_id=handle.result_run_id).fetch_history()
    assert _patch_markers(first) == 1 and _change_version_upserts(first) == 1, "the baseline marker, as before"
    last = first.events[-1].workflow_execution_continued_as_new_event_attributes
    assert last.new_execution_run_id, "the first run handed over"
    second = await client.get_workflow_handle(handle.id, run_id=last.new_execution_run_id).fetch_history()
    begun = second.events[0].workflow_execution_started_event_attributes.input.payloads[0]
    assert ReplicaInput.model_validate_json(begun.data).baseline == NEWEST_INPUT_BASELINE
    assert _patch_markers(second) == 0 and _change_version_upserts(second) == 0
    for history in (first, second):
        await replayer().replay_workflow(history)


async def test_a_baseline_from_a_newer_release_fails_the_workflow_task_not_the_workflow(client: Client) -> None:
    """A run begun by a newer release's reconciler, met by this release's worker in a rolling upgrade: its workflow
    task fails, saying why, and is retried (by a newer worker once one polls); nothing runs under the wrong code."""
    cluster = ScriptedCluster(_pcs("newer"))
    worker, handle = await _run(client, cluster, baseline=NEWEST_INPUT_BASELINE + 1)

    async def failed_task() -> str | None:
        async for event in handle.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                return str(event.workflow_task_failed_event_attributes.failure.message)
        return None

    async with worker:
        message = await await_for(failed_task, timeout=20, what="a failed workflow task")
        running = (await handle.describe()).status
        await handle.terminate("test over")
    assert f"patch baseline {NEWEST_INPUT_BASELINE + 1}" in message, message
    assert running is not None and running.name == "RUNNING"
    assert cluster.calls == [], "nothing read or materialised under the wrong code"


def _local_activities(history: WorkflowHistory) -> list[str]:
    return [local.name for e in history.events if (local := local_activity(e)) is not None]


async def test_a_new_replicas_first_read_materialises_it_from_baseline_15_on(client: Client) -> None:
    """Baseline 15 (FIRST_READ_MATERIALISES_RULE): a new replica's first round is one local activity, the read
    and materialising together, where baseline 14 reads first and materialises after; both replay."""
    counts = {}
    for baseline in (INPUT_BASELINE_14, INPUT_BASELINE_15):
        cluster = ScriptedCluster(_pcs(f"first-read-{baseline}"))
        cluster.made = False  # a new replica: its first read finds nothing
        worker, handle = await _run(client, cluster, baseline=baseline)
        async with worker:
            await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
            history = await client.get_workflow_handle(handle.id, run_id=handle.result_run_id).fetch_history()
            await handle.terminate("test over")
        # Markers up to the materialising one: the whole history's length also counts the status rounds that follow,
        # and how many those are depends on timing (CI once saw 12 events against 8).
        counts[baseline] = _local_activities(history).index(contract.ENSURE_REPLICA_RELEASING) + 1
        await replayer().replay_workflow(history)
        first_task = _local_activities(history)[:1]
        if baseline == INPUT_BASELINE_15:
            assert cluster.calls[:1] == ["read and materialise (cache)"], cluster.calls
            assert first_task == [contract.ENSURE_REPLICA_RELEASING], _local_activities(history)
        else:
            assert cluster.calls[:2] == ["observe (cache)", "materialise"], cluster.calls
            assert first_task == [contract.OBSERVE_REPLICA_CACHED], _local_activities(history)
    assert counts[INPUT_BASELINE_15] == counts[INPUT_BASELINE_14] - 1, f"one marker less until materialised: {counts}"


def test_the_newest_baseline_takes_in_every_replica_patch() -> None:
    """A run begun under the newest baseline asks no patch: a replay answers `patched` from the markers of the
    workflow task it replays, and code after a local activity's result can run one task later live than in a replay
    (tests/workflows/test_incident_patch_in_later_task.py). A new patch comes with a new baseline number."""
    defined = {value for module in (replica, signals, nudges, replica_rollout) for name, value in vars(module).items()
               if name.endswith("_PATCH") and isinstance(value, str)} - {marker for marker, _ in REPLICA_BASELINES}
    assert defined, "the replica's patches"
    assert not defined - RECORDED_BASELINES[NEWEST_INPUT_BASELINE], "patches the newest baseline leaves out"


async def test_a_quiet_hand_over_under_the_newest_baseline_records_no_marker(
        dev_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch) -> None:
    threshold = 30  # lowered: a new one-clique replica is Available at about 15 events, each nudged round adds more
    monkeypatch.setattr(signals, "QUIET_HISTORY_EVENTS", threshold)
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter,
                                  interceptors=[NudgeVersionsInterceptor()])
    cluster = ScriptedCluster(_pcs("quiet-unmarked"))
    worker, handle = await _run(client, cluster, baseline=NEWEST_INPUT_BASELINE)
    version = iter(range(100, 10_000))
    async with worker:
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        first_run = (await handle.describe()).run_id
        while (await handle.describe()).run_id == first_run:
            with nudge_versions.sending({"Pod": next(version)}):
                await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
            await asyncio.sleep(0.2)
        history = await client.get_workflow_handle(handle.id, run_id=first_run).fetch_history()
        await handle.terminate("test over")
    assert history.events[-1].HasField("workflow_execution_continued_as_new_event_attributes")
    assert threshold < len(history.events) < signals.HISTORY_EVENTS_PER_RUN, "handed over as quiet"
    assert _patch_markers(history) == 0 and _change_version_upserts(history) == 0
    await replayer().replay_workflow(history)
