"""The operator's controls (pause, resume, force-terminate) are sent again when the server answers that the workflow
task holding them failed before the workflow accepted them, and only then. The server's answer is built here as the
dev server sends it (FAILED_PRECONDITION with a WorkflowNotReadyFailure); tests/e2e/test_signal_storm.py meets the
real one under a storm of signals."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.any_pb2 import Any as AnyProto
from google.rpc import status_pb2
from temporalio.api.errordetails.v1 import WorkflowNotReadyFailure
from temporalio.service import RPCError, RPCStatusCode

from worker import replica_client
from worker.replica_client import OperatorError, workflow_not_ready
from workflows.messages import ControlResult


def _rpc_error(status: RPCStatusCode, detail: Any | None) -> RPCError:
    details = []
    if detail is not None:
        packed = AnyProto()
        packed.Pack(detail)
        details.append(packed)
    raw = status_pb2.Status(code=status.value, message="m", details=details).SerializeToString()
    return RPCError("Unable to perform workflow execution update due to unexpected workflow task failure.", status,
                    raw)


NOT_READY = _rpc_error(RPCStatusCode.FAILED_PRECONDITION, WorkflowNotReadyFailure())


class _Handle:
    def __init__(self, failures: list[RPCError]) -> None:
        self.failures = failures
        self.calls = 0

    async def execute_update(self, *args: Any, **kwargs: Any) -> ControlResult:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)
        return ControlResult(accepted=True, message="paused")


class _Client:
    def __init__(self, handle: _Handle) -> None:
        self.handle = handle

    def get_workflow_handle(self, workflow_id: str) -> _Handle:
        return self.handle


def test_only_the_not_ready_answer_counts_as_not_taken() -> None:
    assert workflow_not_ready(NOT_READY)
    assert not workflow_not_ready(_rpc_error(RPCStatusCode.FAILED_PRECONDITION, None))
    assert not workflow_not_ready(_rpc_error(RPCStatusCode.NOT_FOUND, WorkflowNotReadyFailure()))


async def test_a_control_the_server_did_not_take_is_sent_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replica_client, "NOT_READY_RETRIES", (0.0, 0.0, 0.0))
    handle = _Handle([NOT_READY, NOT_READY])
    result = await replica_client.pause(_Client(handle), "wf", "storm")  # type: ignore[arg-type]
    assert result.accepted and handle.calls == 3

    handle = _Handle([NOT_READY] * 4)  # still not taken after every retry: one clear error
    with pytest.raises(OperatorError, match="wf: Unable to perform"):
        await replica_client.resume(_Client(handle), "wf")  # type: ignore[arg-type]
    assert handle.calls == 4

    handle = _Handle([_rpc_error(RPCStatusCode.NOT_FOUND, None)])  # any other failure: at once, not again
    with pytest.raises(OperatorError):
        await replica_client.pause(_Client(handle), "wf", "x")  # type: ignore[arg-type]
    assert handle.calls == 1
