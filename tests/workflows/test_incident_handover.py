"""Fault run seed 13, round 23 (tests/fixtures/incidents/README.md): a replica run continued-as-new with nudges it
had not read; the next run read a lagging watch cache and waited for nudges already spent. Replayed with the current
code, the same run hands its successor those nudges and how far its cached reads had got."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from temporalio.worker import (
    ContinueAsNewInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from tests.histories import load, replayer
from workflows.messages import ReplicaInput

INCIDENTS = Path(__file__).resolve().parents[1] / "fixtures" / "incidents"
INCIDENT = "unread-nudges-lost-seed13-round23.json"
HANDED_OVER: list[Any] = []


class _Outbound(WorkflowOutboundInterceptor):
    def continue_as_new(self, input: ContinueAsNewInput) -> Any:
        HANDED_OVER.append(input.args[0])
        return super().continue_as_new(input)


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _CaptureHandover(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound


async def test_the_incident_run_replays_and_hands_its_unread_nudges_to_the_next_run() -> None:
    HANDED_OVER.clear()
    result = await replayer(_CaptureHandover()).replay_workflow(load(INCIDENTS / INCIDENT),
                                                                raise_on_replay_failure=False)
    assert result.replay_failure is None, result.replay_failure
    assert len(HANDED_OVER) == 1
    handed: ReplicaInput = HANDED_OVER[0]
    assert handed.carry is not None
    nudges = handed.carry.nudges
    # Events 989-994 nudged Pod 10444/10446 and PodClique 10450 (the deletions); the last read had reached Pod 10409
    # and PodClique 10414. The next run's first read from a watch cache must reach them, or read the apiserver.
    assert nudges.unread == {"Pod": 10446, "PodClique": 10450}, nudges
    assert nudges.floor["PodClique"] == 10414, nudges
