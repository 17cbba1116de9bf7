"""The worker runs workflows outside Temporal's sandbox unless asked (worker/config.py: workflow_sandbox)."""

from __future__ import annotations

import pytest
from temporalio.worker import UnsandboxedWorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from worker.app import workflow_runner
from worker.config import WorkerSettings


def test_workflows_run_unsandboxed_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GROVE_TEMPORAL_WORKFLOW_SANDBOX", raising=False)
    assert isinstance(workflow_runner(WorkerSettings()), UnsandboxedWorkflowRunner)


@pytest.mark.parametrize("value, sandboxed", [("1", True), ("on", True), ("0", False), ("", False)])
def test_the_environment_turns_the_sandbox_on(monkeypatch: pytest.MonkeyPatch, value: str, sandboxed: bool) -> None:
    monkeypatch.setenv("GROVE_TEMPORAL_WORKFLOW_SANDBOX", value)
    runner = workflow_runner(WorkerSettings())
    assert isinstance(runner, SandboxedWorkflowRunner if sandboxed else UnsandboxedWorkflowRunner)
