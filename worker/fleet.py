"""Gauges of the whole fleet, kept by the watcher's leader only (one writer, so sums across workers are right):

- `grove_temporal_replicas{phase}`: running replica workflows per phase, from Temporal visibility counts;
- `grove_temporal_replicas_paused`: running replicas that are paused;
- `grove_temporal_pending_deadlines`: terminationDelay deadlines counting down, from the status query of the
  replicas whose phase can hold one (Breached, Terminating: a breach begins a deadline, DESIGN's gang termination);
- `grove_temporal_next_deadline_seconds`: seconds until the earliest of them (absent when there is none).

Workers that do not lead export the gauges too, at 0 from their start: alerting rules use max() across workers.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from prometheus_client import Gauge
from temporalio.client import Client

from workflows.contract import GROVE_PAUSED, replica_query
from workflows.messages import Phase, ReplicaStatus

log = logging.getLogger(__name__)

REPLICAS = Gauge("grove_temporal_replicas", "Running replica workflows by phase (kept by the watcher's leader)",
                 ["phase"])
PAUSED = Gauge("grove_temporal_replicas_paused", "Running replica workflows that are paused")
PENDING_DEADLINES = Gauge("grove_temporal_pending_deadlines",
                          "terminationDelay deadlines counting down across all replicas")
NEXT_DEADLINE = Gauge("grove_temporal_next_deadline_seconds",
                      "Seconds until the earliest pending terminationDelay deadline (NaN when none)")
DEADLINE_PHASES = (Phase.BREACHED, Phase.TERMINATING)

for _phase in Phase:
    REPLICAS.labels(_phase.value)
PAUSED.set(0)
PENDING_DEADLINES.set(0)
NEXT_DEADLINE.set(float("nan"))


async def refresh(client: Client, namespace: str | None = None) -> None:
    """One reading of every gauge."""
    from worker import replica_client

    for phase in Phase:
        counted = await client.count_workflows(replica_query(namespace=namespace, phase=phase.value))
        REPLICAS.labels(phase.value).set(counted.count)
    paused = f"{replica_query(namespace=namespace)} AND {GROVE_PAUSED.name} = true"
    PAUSED.set((await client.count_workflows(paused)).count)
    due: list[datetime] = []
    for phase in DEADLINE_PHASES:
        for replica in await replica_client.list_replicas(client, namespace=namespace, phase=phase.value):
            try:
                status: ReplicaStatus = await replica_client.replica_status(client, replica.workflow_id)
            except Exception as exc:  # a replica that just completed; counted next time
                log.debug("status of %s: %s", replica.workflow_id, exc)
                continue
            due += [d.due_at for d in status.deadlines]
    PENDING_DEADLINES.set(len(due))
    now = datetime.now(UTC)
    NEXT_DEADLINE.set(max(0.0, (min(due) - now).total_seconds()) if due else float("nan"))


async def keep_fleet_gauges(client: Client, namespace: str | None, every: float = 15.0) -> None:
    """Run while leading (worker.leader): refresh the gauges every `every` seconds."""
    while True:
        try:
            await refresh(client, namespace)
        except Exception as exc:  # Temporal unreachable for a moment: keep the last values, try again
            log.warning("fleet gauges not refreshed: %s", exc)
        await asyncio.sleep(every)
