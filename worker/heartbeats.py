"""Heartbeats for every activity scheduled with a heartbeat timeout, sent by the worker, not by the activity code.

Why: an activity lost with its worker (killed, or its completion dropped by a network partition from Temporal) is
retried only when a timeout fires. Without a heartbeat timeout that is start_to_close: a minute for a replica's
activities, five for the reconciler's batch, during which the replica or every PodCliqueSet change waits (fault
run seed 4, round 4: a rolling update started minutes late). With one, Temporal retries within the heartbeat
timeout. The workflows set it (patch `activity-heartbeats`); this interceptor keeps a running activity alive.

The first heartbeat goes after a third of the timeout, so the many activities that finish within a second send
none (a heartbeat is a Temporal request, not a history event)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from temporalio import activity, client
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)


class KeepAliveInterceptor(client.Interceptor, Interceptor):
    """Heartbeats while an activity runs, when its schedule set a heartbeat timeout. A client interceptor too (a
    pass-through there), so a Worker built on a client made with it applies it."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _KeepAlive(next)


class _KeepAlive(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        # Heartbeat through the outbound chain, from the event loop: for a sync activity the SDK swaps the context's
        # heartbeat for one that blocks on the loop, which must only be called from the activity's own thread.
        self._outbound = outbound
        super().init(outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        timeout = activity.info().heartbeat_timeout
        if not timeout:
            return await super().execute_activity(input)
        beating = asyncio.create_task(self._beat(max(timeout.total_seconds() / 3, 0.2)))
        try:
            return await super().execute_activity(input)
        finally:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    async def _beat(self, every: float) -> None:
        while True:
            await asyncio.sleep(every)
            self._outbound.heartbeat()
