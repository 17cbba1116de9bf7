"""Worker settings that trade safety margins for cost (worker/config.py): no Temporal sandbox unless asked for,
enough workflows cached, the nudge window."""

from __future__ import annotations

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner
from typer.testing import CliRunner

from worker.app import workflow_runner
from worker.cli import app
from worker.config import WorkerSettings


def test_workflows_run_outside_the_sandbox_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_WORKFLOW_SANDBOX", raising=False)
    assert isinstance(workflow_runner(WorkerSettings().workflow_sandbox), UnsandboxedWorkflowRunner)


@pytest.mark.parametrize("value, sandboxed", [("1", True), ("on", True), ("TRUE", True), ("0", False),
                                              ("false", False), ("", False)])
def test_the_environment_turns_the_sandbox_on(monkeypatch: pytest.MonkeyPatch, value: str, sandboxed: bool) -> None:
    monkeypatch.setenv("GROVE_TEMPORAL_WORKFLOW_SANDBOX", value)
    runner = workflow_runner(WorkerSettings().workflow_sandbox)
    assert isinstance(runner, SandboxedWorkflowRunner if sandboxed else UnsandboxedWorkflowRunner)


def test_a_misspelt_sandbox_switch_is_refused_in_one_line_naming_the_variable() -> None:
    result = CliRunner(env={"GROVE_TEMPORAL_WORKFLOW_SANDBOX": "sometimes"}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("error: GROVE_TEMPORAL_WORKFLOW_SANDBOX must be 1/true/yes/on or 0/false/no/off, "
                                     "got 'sometimes'")


def test_the_workflow_cache_holds_a_fleet_of_thousands_unless_told_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    """An evicted workflow replays its whole history at its next task: the SDK's 1,000 would make every round of a
    5,000-replica fleet a replay."""
    monkeypatch.delenv("GROVE_TEMPORAL_MAX_CACHED_WORKFLOWS", raising=False)
    assert WorkerSettings().max_cached_workflows == 10_000
    monkeypatch.setenv("GROVE_TEMPORAL_MAX_CACHED_WORKFLOWS", "2500")
    assert WorkerSettings().max_cached_workflows == 2500


@pytest.mark.parametrize("value", ["lots", "-3", "1e4"])
def test_a_malformed_cache_size_is_refused_in_one_line_naming_the_variable(value: str) -> None:
    result = CliRunner(env={"GROVE_TEMPORAL_MAX_CACHED_WORKFLOWS": value}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: GROVE_TEMPORAL_MAX_CACHED_WORKFLOWS must be a whole number, got {value!r}"


def test_the_nudge_window_stays_at_five_milliseconds_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_NUDGE_COALESCE_MS", raising=False)
    assert WorkerSettings().nudge_coalesce.total_seconds() == 0.005
    monkeypatch.setenv("GROVE_TEMPORAL_NUDGE_COALESCE_MS", "200")
    assert WorkerSettings().nudge_coalesce.total_seconds() == 0.2


def test_status_only_nudges_wait_a_quarter_second_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS", raising=False)
    assert WorkerSettings().nudge_status_window.total_seconds() == 5.0
    monkeypatch.setenv("GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS", "0")
    assert WorkerSettings().nudge_status_window.total_seconds() == 0


@pytest.mark.parametrize(("value", "message"), [
    ("80a", "GROVE_TEMPORAL_HTTP_PORT must be a whole number, got '80a'"),
    ("70000", "GROVE_TEMPORAL_HTTP_PORT must be a port from 1 to 65535, got 70000"),
    ("0", "GROVE_TEMPORAL_HTTP_PORT must be a port from 1 to 65535, got 0"),
])
def test_a_malformed_http_port_is_refused_in_one_line_naming_the_variable(value: str, message: str) -> None:
    result = CliRunner(env={"GROVE_TEMPORAL_HTTP_PORT": value}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: {message}"


def test_the_http_port_is_read_when_given_and_off_when_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_HTTP_PORT", raising=False)
    assert WorkerSettings().http_port is None
    monkeypatch.setenv("GROVE_TEMPORAL_HTTP_PORT", "9102")
    assert WorkerSettings().http_port == 9102


def test_workflow_task_slots_are_twelve_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS", raising=False)
    assert WorkerSettings().max_concurrent_workflow_tasks == 12
    monkeypatch.setenv("GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS", "16")
    assert WorkerSettings().max_concurrent_workflow_tasks == 16


def test_freed_workflow_task_slots_go_to_sticky_polls_first_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    from temporalio.worker import FixedSizeSlotSupplier

    from worker.app import slot_tuner
    from worker.slots import StickyFirstSlots

    monkeypatch.delenv("GROVE_TEMPORAL_STICKY_FIRST_SLOTS", raising=False)
    supplier = slot_tuner(WorkerSettings())._get_workflow_task_slot_supplier()
    assert isinstance(supplier, StickyFirstSlots) and supplier.free() == 12
    monkeypatch.setenv("GROVE_TEMPORAL_STICKY_FIRST_SLOTS", "off")  # the SDK's fixed slots, as before
    assert slot_tuner(WorkerSettings())._get_workflow_task_slot_supplier() == FixedSizeSlotSupplier(12)
    result = CliRunner(env={"GROVE_TEMPORAL_STICKY_FIRST_SLOTS": "sometimes"}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert "GROVE_TEMPORAL_STICKY_FIRST_SLOTS must be 1/true/yes/on or 0/false/no/off" in result.output


@pytest.mark.parametrize(("value", "why"), [("0", "must be at least 1, got 0"),
                                            ("many", "must be a whole number, got 'many'")])
def test_a_bad_slot_count_is_refused_in_one_line_naming_the_variable(value: str, why: str) -> None:
    result = CliRunner(env={"GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS": value}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS {why}"


def test_replica_workflows_get_temporals_task_timeout_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S", raising=False)
    assert WorkerSettings().replica_task_timeout.total_seconds() == 10
    monkeypatch.setenv("GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S", "30")
    assert WorkerSettings().replica_task_timeout.total_seconds() == 30


@pytest.mark.parametrize("value, problem", [("0", "between 1 and 120 seconds, got 0"),
                                            ("121", "between 1 and 120 seconds, got 121"),
                                            ("20s", "a whole number, got '20s'")])
def test_a_task_timeout_temporal_would_refuse_is_refused_in_one_line_naming_the_variable(value: str,
                                                                                          problem: str) -> None:
    result = CliRunner(env={"GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S": value}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S must be {problem}"


def test_new_replicas_are_paced_by_how_long_materialising_takes_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pace's target is 40% of the replicas' task timeout (the SDK heartbeats a task at 80%); its ceiling is the
    slot count, so it never lets more run than the slots did; off, or without sticky-first slots, there is none."""
    from worker.app import creation_pace, slot_tuner
    from worker.slots import StickyFirstSlots

    for variable in ("GROVE_TEMPORAL_CREATION_PACING", "GROVE_TEMPORAL_STICKY_FIRST_SLOTS",
                     "GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S", "GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS"):
        monkeypatch.delenv(variable, raising=False)
    pace = creation_pace(WorkerSettings())
    assert pace is not None and (pace.ceiling, pace.target, pace.floor) == (12, 4.0, 2)
    supplier = slot_tuner(WorkerSettings(), pace)._get_workflow_task_slot_supplier()
    assert isinstance(supplier, StickyFirstSlots)
    monkeypatch.setenv("GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S", "30")
    monkeypatch.setenv("GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS", "1")
    pace = creation_pace(WorkerSettings())
    assert pace is not None and (pace.ceiling, pace.target, pace.floor) == (1, 12.0, 1)
    monkeypatch.setenv("GROVE_TEMPORAL_CREATION_PACING", "off")
    assert creation_pace(WorkerSettings()) is None
    monkeypatch.setenv("GROVE_TEMPORAL_CREATION_PACING", "on")
    monkeypatch.setenv("GROVE_TEMPORAL_STICKY_FIRST_SLOTS", "off")
    assert creation_pace(WorkerSettings()) is None
