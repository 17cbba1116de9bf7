"""The nudge signal's versions header: from the watcher's send into the replica workflow's `Nudge.versions`.

A nudge that says "a watch event of kind K at resourceVersion V" is covered by an observation whose read of K saw up
to V or beyond, whatever the clocks of the watcher and the activity worker say (workflows/nudges.py). The versions
travel as a Temporal header, not in the payload: a worker that predates them ignores the header and keeps its clock
path, where a payload field it cannot decode would make it drop the signal. Headers are recorded in the history, so
a replay hands the workflow the same versions.

One interceptor for both ends: on a client it adds the header to a nudge sent inside `sending(versions)`; on a
worker (and a Replayer: pass it, or replays of versioned nudges take the clock path and diverge) it copies the
header into the Nudge argument before the handler runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from contextvars import ContextVar

from temporalio import client, workflow
from temporalio.converter import PayloadConverter
from temporalio.worker import (
    HandleSignalInput,
    Interceptor,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
)

from workflows.contract import NUDGE_SIGNAL, NUDGE_VERSIONS_HEADER
from workflows.messages import Nudge

Versions = dict[str, int]

_outgoing: ContextVar[Versions | None] = ContextVar("nudge_versions", default=None)


@contextlib.contextmanager
def sending(versions: Versions | None) -> Iterator[None]:
    """Nudges signalled inside this block (on a client with NudgeVersionsInterceptor) carry `versions`."""
    token = _outgoing.set(versions or None)
    try:
        yield
    finally:
        _outgoing.reset(token)


class _Outbound(client.OutboundInterceptor):
    async def signal_workflow(self, input: client.SignalWorkflowInput) -> None:
        versions = _outgoing.get()
        if versions and input.signal == NUDGE_SIGNAL:
            header = PayloadConverter.default.to_payloads([versions])[0]
            input = dataclasses.replace(input, headers={**input.headers, NUDGE_VERSIONS_HEADER: header})
        await super().signal_workflow(input)


class _Inbound(WorkflowInboundInterceptor):
    async def handle_signal(self, input: HandleSignalInput) -> None:
        header = input.headers.get(NUDGE_VERSIONS_HEADER)
        if header is not None and input.signal == NUDGE_SIGNAL and input.args and isinstance(input.args[0], Nudge):
            nudge: Nudge = input.args[0]
            try:
                decoded = PayloadConverter.default.from_payloads([header])[0]
                nudge = Nudge(sent_at=nudge.sent_at, versions=decoded)
            except Exception as err:  # noqa: BLE001 - a bad header leaves the nudge on its clock path
                workflow.logger.warning("nudge versions header ignored: %s", err)
            input = dataclasses.replace(input, args=[nudge, *input.args[1:]])
        await super().handle_signal(input)


class NudgeVersionsInterceptor(client.Interceptor, Interceptor):
    def intercept_client(self, next: client.OutboundInterceptor) -> client.OutboundInterceptor:
        return _Outbound(next)

    def workflow_interceptor_class(
            self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor] | None:
        return _Inbound
