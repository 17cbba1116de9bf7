"""Gauges of the whole fleet, kept by the watcher's leader only (one writer, so sums across workers are right):

- `grove_temporal_replicas{phase}`: running replica workflows per phase, from Temporal visibility counts;
- `grove_temporal_replicas_paused`: running replicas that are paused;
- `grove_temporal_pending_deadlines`: terminationDelay deadlines counting down, from the memo of the replicas whose
  phase can hold one (Breached, Terminating: a breach begins a deadline, DESIGN's gang termination), as the visibility
  listing returns it; only a replica whose run predates the memo (patch deadline-memo) is asked its status;
- `grove_temporal_next_deadline_seconds`: seconds until the earliest of them (absent when there is none).

Workers that do not lead export the gauges too, at 0 from their start: alerting rules use max() across workers.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import Gauge
from temporalio.client import Client, WorkflowExecution

from workflows.contract import DEADLINE_MEMO, GROVE_PAUSED, replica_query
from workflows.messages import DeadlineMemo, Phase, ReplicaStatus
from workflows.presentation import DEADLINE_PHASES, deadline_memo

log = logging.getLogger(__name__)

REPLICAS = Gauge("grove_temporal_replicas", "Running replica workflows by phase (kept by the watcher's leader)",
                 ["phase"])
PAUSED = Gauge("grove_temporal_replicas_paused", "Running replica workflows that are paused")
PENDING_DEADLINES = Gauge("grove_temporal_pending_deadlines",
                          "terminationDelay deadlines counting down across all replicas")
NEXT_DEADLINE = Gauge("grove_temporal_next_deadline_seconds",
                      "Seconds until the earliest pending terminationDelay deadline (NaN when none)")

for _phase in Phase:
    REPLICAS.labels(_phase.value)
PAUSED.set(0)
PENDING_DEADLINES.set(0)
NEXT_DEADLINE.set(float("nan"))


@dataclass(frozen=True)
class DeadlineReading:
    """Where one reading of the deadline gauges came from: replicas whose memo said, and replicas asked their status
    (runs begun by an earlier release, which keep no memo)."""

    from_memo: int
    queried: int


async def refresh(client: Client, namespace: str | None = None) -> DeadlineReading:
    """One reading of every gauge."""
    for phase in Phase:
        counted = await client.count_workflows(replica_query(namespace=namespace, phase=phase.value))
        REPLICAS.labels(phase.value).set(counted.count)
    paused = f"{replica_query(namespace=namespace)} AND {GROVE_PAUSED.name} = true"
    PAUSED.set((await client.count_workflows(paused)).count)
    pending, due, from_memo, queried = 0, [], 0, 0
    for phase in DEADLINE_PHASES:
        async for execution in client.list_workflows(replica_query(namespace=namespace, phase=phase.value)):
            memo = await _deadline_memo(execution)
            if memo is None:
                memo = await _asked(client, execution.id)
                queried += 1
            else:
                from_memo += 1
            if memo is not None:
                pending += memo.count
                due += [memo.next_due] if memo.next_due is not None else []
    PENDING_DEADLINES.set(pending)
    now = datetime.now(UTC)
    NEXT_DEADLINE.set(max(0.0, (min(due) - now).total_seconds()) if due else float("nan"))
    return DeadlineReading(from_memo=from_memo, queried=queried)


async def _deadline_memo(execution: WorkflowExecution) -> DeadlineMemo | None:
    try:
        memo: DeadlineMemo | None = await execution.memo_value(DEADLINE_MEMO, None, type_hint=DeadlineMemo)
    except Exception as exc:  # written by a release whose memo this one cannot read: ask the replica instead
        log.debug("deadline memo of %s: %s", execution.id, exc)
        return None
    return memo


async def _asked(client: Client, workflow_id: str) -> DeadlineMemo | None:
    from worker import replica_client

    try:
        status: ReplicaStatus = await replica_client.replica_status(client, workflow_id)
    except Exception as exc:  # a replica that just completed; counted next time
        log.debug("status of %s: %s", workflow_id, exc)
        return None
    return deadline_memo(status.deadlines)


async def keep_fleet_gauges(client: Client, namespace: str | None, every: float = 15.0) -> None:
    """Run while leading (worker.leader): refresh the gauges every `every` seconds."""
    while True:
        try:
            reading = await refresh(client, namespace)
            if reading.queried:
                log.debug("fleet gauges: %d replicas asked their deadlines (runs from before the deadline memo)",
                          reading.queried)
        except Exception as exc:  # Temporal unreachable for a moment: keep the last values, try again
            log.warning("fleet gauges not refreshed: %s", exc)
        await asyncio.sleep(every)
