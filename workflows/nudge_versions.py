"""The nudge signal's versions header: from the watcher's send into the replica workflow's `Nudge.versions`.

A nudge that says "a watch event of kind K at resourceVersion V" is covered by an observation whose read of K saw up
to V or beyond, whatever the clocks of the watcher and the activity worker say (workflows/nudges.py). The versions
travel as a Temporal header, not in the payload: a worker that predates them ignores the header and keeps its clock
path, where a payload field it cannot decode would make it drop the signal. Headers are recorded in the history, so
a replay hands the workflow the same versions.

One interceptor for both ends: on a client it adds the header to a nudge sent inside `sending(versions)`; on a
worker (and a Replayer: pass it, or replays of versioned nudges take the clock path and diverge) it copies the
header into the Nudge argument before the handler runs.

A second header travels the same way: the PodCliques of the replica the watcher saw reach their minAvailable
(`Nudge.reached`). The watcher may hold a nudge for a Ready back for the status window, and a Ready lost meanwhile
would leave the round to read the PodClique below minAvailable: the crossing rides with the nudge instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from temporalio import client, workflow
from temporalio.converter import PayloadConverter
from temporalio.worker import (
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from workflows.contract import NUDGE_REACHED_HEADER, NUDGE_SIGNAL, NUDGE_VERSIONS_HEADER
from workflows.messages import Nudge

Versions = dict[str, int]
Reached = dict[str, str]  # PodClique name -> UID

_outgoing: ContextVar[Versions | None] = ContextVar("nudge_versions", default=None)
_outgoing_reached: ContextVar[Reached | None] = ContextVar("nudge_reached", default=None)


@contextlib.contextmanager
def sending(versions: Versions | None, reached: Reached | None = None) -> Iterator[None]:
    """Nudges signalled inside this block (on a client with NudgeVersionsInterceptor) carry `versions` and
    `reached`."""
    token = _outgoing.set(versions or None)
    reached_token = _outgoing_reached.set(reached or None)
    try:
        yield
    finally:
        _outgoing_reached.reset(reached_token)
        _outgoing.reset(token)


class _Outbound(client.OutboundInterceptor):
    async def signal_workflow(self, input: client.SignalWorkflowInput) -> None:
        if input.signal == NUDGE_SIGNAL:
            headers = dict(input.headers)
            for name, value in ((NUDGE_VERSIONS_HEADER, _outgoing.get()), (NUDGE_REACHED_HEADER,
                                                                           _outgoing_reached.get())):
                if value:
                    headers[name] = PayloadConverter.default.to_payloads([value])[0]
            input = dataclasses.replace(input, headers=headers)
        await super().signal_workflow(input)


def _decoded(input: HandleSignalInput, name: str) -> Any:
    header = input.headers.get(name)
    if header is None:
        return None
    try:
        return PayloadConverter.default.from_payloads([header])[0]
    except Exception as err:  # noqa: BLE001 - a bad header is ignored: the nudge keeps what the payload says
        workflow.logger.warning("nudge header %s ignored: %s", name, err)
        return None


class _Inbound(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        if input.signal == NUDGE_SIGNAL and input.args and isinstance(input.args[0], Nudge):
            nudge: Nudge = input.args[0]
            versions, reached = _decoded(input, NUDGE_VERSIONS_HEADER), _decoded(input, NUDGE_REACHED_HEADER)
            # Each on its own: a bad one is ignored (a nudge without versions keeps its clock path), the other kept.
            if versions is not None:
                try:
                    nudge = Nudge(sent_at=nudge.sent_at, versions=versions, reached=nudge.reached)
                except Exception as err:  # noqa: BLE001
                    workflow.logger.warning("nudge header ignored: %s", err)
            if reached is not None:
                try:
                    nudge = Nudge(sent_at=nudge.sent_at, versions=nudge.versions, reached=reached)
                except Exception as err:  # noqa: BLE001
                    workflow.logger.warning("nudge header ignored: %s", err)
            input = dataclasses.replace(input, args=[nudge, *input.args[1:]])
        await super().handle_signal(input)


class NudgeVersionsInterceptor(client.Interceptor, Interceptor):
    def intercept_client(self, next: client.OutboundInterceptor) -> client.OutboundInterceptor:
        return _Outbound(next)

    def workflow_interceptor_class(
            self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound
