"""Where a replica's recovery after a worker kill spends its seconds, read from the workflow histories.

For every replica workflow of a namespace, the first of each step after the kill: the watcher's nudge arrives
(signal), the workflow task that nudge made times out on the dead worker's sticky queue and is scheduled on the
shared task queue, a live worker starts that task (it replays the history unless it has the workflow cached) and
completes it. Summed over the replicas, the phases show whether recovery waits on the Lease, on Temporal's sticky
timeout or on the live workers' CPU.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from temporalio.api.enums.v1 import TimeoutType
from temporalio.client import Client
from temporalio.service import RPCError

from bench.stats import summary
from workflows.contract import REPLICA_WORKFLOW

STEPS = ("nudged", "sticky_timed_out", "task_started", "task_completed")


def first_steps(events: list[Any], after: float) -> dict[str, float]:
    """Seconds from `after` (the kill) to the first nudge, sticky timeout, task start and task completion."""
    found: dict[str, float] = {}
    for event in events:
        at = event.event_time.ToDatetime().timestamp() - after
        if at < 0:
            continue
        if event.HasField("workflow_execution_signaled_event_attributes"):
            found.setdefault("nudged", at)
        elif event.HasField("workflow_task_timed_out_event_attributes"):
            if event.workflow_task_timed_out_event_attributes.timeout_type == TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START:
                found.setdefault("sticky_timed_out", at)
        elif event.HasField("workflow_task_started_event_attributes"):
            found.setdefault("task_started", at)
        elif event.HasField("workflow_task_completed_event_attributes"):
            found.setdefault("task_completed", at)
    return found


def task_spans(events: list[Any], after: float) -> list[tuple[float, float]]:
    """(started, finished) of every workflow task a worker started after `after`, in seconds from it."""
    started: dict[int, float] = {}
    spans = []
    for event in events:
        at = event.event_time.ToDatetime().timestamp() - after
        if event.HasField("workflow_task_started_event_attributes"):
            started[event.event_id] = at
            continue
        for field in ("workflow_task_completed_event_attributes", "workflow_task_failed_event_attributes",
                      "workflow_task_timed_out_event_attributes"):
            if event.HasField(field):
                begun = started.pop(getattr(event, field).started_event_id, None)
                if begun is not None and begun >= 0:
                    spans.append((begun, at))
    return spans


def occupancy(spans: list[tuple[float, float]]) -> dict[str, Any]:
    """How busy the workers' workflow-task slots were over the recovery: tasks, their durations, and the mean number
    in progress from the first start to the last finish (the slots a worker has bound it from above)."""
    if not spans:
        return {"tasks": 0}
    first, last = min(b for b, _ in spans), max(e for _, e in spans)
    busy = sum(e - b for b, e in spans)
    return {"tasks": len(spans), "task_s": summary([e - b for b, e in spans]),
            "mean_in_progress": round(busy / (last - first), 2) if last > first else None,
            "from_s": round(first, 2), "to_s": round(last, 2)}


async def read(client: Client, namespace: str, after: float, concurrency: int = 16,
               settle: float = 15.0) -> dict[str, Any]:
    """The phases of every replica workflow of `namespace` (ids `pcs/<namespace>/...`), summarised.

    A replica shows its progress in kube-apiserver from a local activity, before the workflow task that ran it has
    completed; a history read at that moment has no completed task yet. Each history is read again (every 0.2 s, for
    at most `settle` seconds) until it has one."""
    ids: list[tuple[str, str]] = []
    async for listed in client.list_workflows(f"WorkflowType='{REPLICA_WORKFLOW}' AND ExecutionStatus='Running'"):
        if listed.id.startswith(f"pcs/{namespace}/"):
            ids.append((listed.id, listed.run_id))
    gate = asyncio.Semaphore(concurrency)
    steps: list[dict[str, float]] = []
    spans: list[tuple[float, float]] = []

    deadline = time.monotonic() + settle

    async def one(workflow_id: str, run_id: str) -> None:
        handle = client.get_workflow_handle(workflow_id, run_id=run_id)
        while True:
            async with gate:
                with contextlib.suppress(RPCError):
                    events = list((await handle.fetch_history()).events)
                    found = first_steps(events, after)
                    if "task_completed" in found or time.monotonic() >= deadline:
                        steps.append(found)
                        spans.extend(task_spans(events, after))
                        return
            if time.monotonic() >= deadline:
                return
            await asyncio.sleep(0.2)

    await asyncio.gather(*(one(w, r) for w, r in ids))
    replay_wait = [s["task_started"] - s["sticky_timed_out"] for s in steps
                   if "task_started" in s and "sticky_timed_out" in s]
    return {"workflows": len(steps),
            "sticky_timeouts": sum(1 for s in steps if "sticky_timed_out" in s),
            **{f"{step}_after_kill_s": summary([s[step] for s in steps if step in s]) for step in STEPS},
            "queued_after_sticky_timeout_s": summary(replay_wait),
            "workflow_tasks": occupancy(spans)}
