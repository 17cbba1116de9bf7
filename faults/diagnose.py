"""What the fault runner prints when a round does not converge: enough to tell afterwards whether the product or the
stack (a scheduler that lost its watches, a node gone) held it up, without the run directory's logs."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from temporalio.api.enums.v1 import PendingActivityState, PendingWorkflowTaskState
from temporalio.client import Client

JSON = dict[str, Any]
SHOWN = 12  # pods per unsettled round: the first few tell the story
# A workflow task held this long is worth a line: the SDK keeps one open while its local activities run (releases,
# cached reads, mirrors), so a round stuck in one shows here and not among the pending activities.
HELD_TASK_SECONDS = 2.0


def _condition(pod: JSON, kind: str) -> JSON | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def unready_pod_lines(pods: list[JSON], now: datetime | None = None) -> list[str]:
    """One line per pod that is not Ready: phase, node, gates, why it is not scheduled or not Ready, its age."""
    now = now or datetime.now(UTC)
    lines: list[str] = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        ready = _condition(pod, "Ready")
        if ready is not None and ready.get("status") == "True":
            continue
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        parts = [f"phase {status.get('phase', '?')}", f"node {spec.get('nodeName') or '-'}"]
        gates = [g["name"] for g in spec.get("schedulingGates") or []]
        if gates:
            parts.append(f"gates {','.join(gates)}")
        scheduled = _condition(pod, "PodScheduled")
        if scheduled is not None and scheduled.get("status") != "True":
            parts.append(f"unscheduled: {scheduled.get('reason', '')} {(scheduled.get('message') or '')[:120]}")
        if ready is not None and ready.get("reason"):
            parts.append(f"not Ready: {ready['reason']}")
        if meta.get("deletionTimestamp"):
            parts.append(f"deleting since {meta['deletionTimestamp']}")
        created = meta.get("creationTimestamp")
        if created:
            age = now - datetime.fromisoformat(created.replace("Z", "+00:00"))
            parts.append(f"age {age.total_seconds():.0f}s")
        lines.append(f"pod {meta['name']}: {', '.join(parts)}")
    if len(lines) > SHOWN:
        lines = [*lines[:SHOWN], f"... and {len(lines) - SHOWN} more pods not Ready"]
    return lines or ["every pod is Ready"]


async def open_workflow_lines(client: Client, task_queue: str, histories_dir: Path) -> list[str]:
    """For an unsettled round, per open workflow of the run: each pending activity (an activity lost with a worker
    waits out its timeout), and a workflow task that is failing (attempt > 1: a nondeterminism error, a bug) or held
    open (a local activity that does not return). Every open workflow's history is written to `histories_dir` as
    JSON, to replay or read afterwards without the run's Temporal database."""
    lines: list[str] = []
    written = noted = 0
    try:
        async for execution in client.list_workflows(f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"):
            handle = client.get_workflow_handle(execution.id)
            work = pending_work_lines(execution.id, (await handle.describe()).raw_description)
            lines += work
            noted += len(work)
            history = await handle.fetch_history()
            histories_dir.mkdir(parents=True, exist_ok=True)
            (histories_dir / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', execution.id)}.json").write_text(history.to_json())
            written += 1
    except Exception as error:  # diagnostics only: never fail the run for them
        lines.append(f"could not describe the open workflows: {error}")
    if not noted:
        lines.append("no workflow of this run has an activity pending or a workflow task failing or held")
    lines.append(f"histories of {written} open workflows written to {histories_dir}")
    return lines


def pending_work_lines(workflow_id: str, description: Any, now: float | None = None) -> list[str]:
    """`description`: a DescribeWorkflowExecutionResponse."""
    now = time.time() if now is None else now
    lines: list[str] = []
    for pending in description.pending_activities:
        started = pending.last_started_time.ToDatetime(tzinfo=UTC) if pending.HasField("last_started_time") else None
        since = f", started {now - started.timestamp():.0f}s ago" if started else ""
        failure = pending.last_failure.message if pending.HasField("last_failure") else ""
        state = PendingActivityState.Name(pending.state).removeprefix("PENDING_ACTIVITY_STATE_")
        lines.append(f"pending in {workflow_id}: {pending.activity_type.name} attempt {pending.attempt}"
                     f" ({state}{since}){': ' + failure[:200] if failure else ''}")
    if description.HasField("pending_workflow_task"):
        task = description.pending_workflow_task
        state = PendingWorkflowTaskState.Name(task.state).removeprefix("PENDING_WORKFLOW_TASK_STATE_")
        first = task.original_scheduled_time.ToDatetime(tzinfo=UTC) if task.HasField("original_scheduled_time") \
            else None
        waited = now - first.timestamp() if first else 0.0
        if task.attempt > 1 or waited >= HELD_TASK_SECONDS:
            why = "failing, retried" if task.attempt > 1 else "held open (a local activity running, or a slow task)"
            lines.append(f"workflow task of {workflow_id}: attempt {task.attempt} ({state}, first scheduled "
                         f"{waited:.0f}s ago): {why}")
    return lines
