"""Recorded workflow histories: where they live, how they are saved, how they are replayed.

End-to-end tests replay the history of every replica workflow they drove (so a non-deterministic change fails the
run that exposed it) and, with `pytest --record-histories`, save them under tests/fixtures/histories/ as the
fixtures that tests/workflows/test_replay.py replays at unit speed.
"""

from __future__ import annotations

import base64
import copy
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio.client import Client, WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Interceptor, Replayer

from faults.history import write_history
from worker.app import workflow_runner
from worker.doctor import replay_error
from workflows.nudge_versions import NudgeVersionsInterceptor
from workflows.reconciler import ReconcilerWorkflow
from workflows.replica import ReplicaWorkflow
from workflows.rollout import RolloutWorkflow

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "histories"


def replayer(*extra: Interceptor, sandboxed: bool = True) -> Replayer:
    """As a worker replays: with the nudge versions header read (workflows/nudge_versions.py); `extra` interceptors
    after it (a test that watches what the replayed code does). Sandboxed unless asked otherwise, as the worker runs
    by default; `sandboxed=False` replays as a worker with GROVE_TEMPORAL_WORKFLOW_SANDBOX=0 does."""
    return Replayer(workflows=[ReplicaWorkflow, ReconcilerWorkflow, RolloutWorkflow],
                    workflow_runner=workflow_runner(sandboxed),
                    data_converter=pydantic_data_converter, interceptors=[NudgeVersionsInterceptor(), *extra])


def save(history: WorkflowHistory, name: str) -> Path:
    """Write `history` as `<name>.json` (the workflow id is kept beside the events for WorkflowHistory.from_json)."""
    return write_history(history, FIXTURES / f"{name}.json")


def load(path: Path) -> WorkflowHistory:
    body = json.loads(path.read_text())
    workflow_id = body.pop("workflowId", path.stem)
    return WorkflowHistory.from_json(workflow_id, body)


# Each history read's RPC deadline (the read takes milliseconds).
FETCH_TIMEOUT = timedelta(seconds=30)


async def run_histories(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    """Every run of the workflow, newest first: the current run, then each run it continued from (a replica hands
    over by continue-as-new once quiet, so one run rarely holds all it did)."""
    histories = [await client.get_workflow_handle(workflow_id).fetch_history(rpc_timeout=FETCH_TIMEOUT)]
    while previous := histories[-1].events[0].workflow_execution_started_event_attributes.continued_execution_run_id:
        histories.append(await client.get_workflow_handle(workflow_id, run_id=previous)
                         .fetch_history(rpc_timeout=FETCH_TIMEOUT))
    return histories


async def replay_failure(history: WorkflowHistory) -> str | None:
    """Why `history` does not replay as a worker replays it (`replayer()`), or None where it does."""
    error = await replay_error(history, replayer())
    return None if error is None else str(error)


def payload(holder: dict[str, Any]) -> Any:
    """The JSON value of a payload as a history file holds it (base64 `data`)."""
    return json.loads(base64.b64decode(holder["data"]))


def set_payload(holder: dict[str, Any], value: Any) -> None:
    holder["data"] = base64.b64encode(json.dumps(value).encode()).decode()


def regrouped(path: Path, order: list[int], *, recorded_baseline: int, baseline: int) -> tuple[str, list[dict[str, Any]]]:
    """The workflow id and events of the history file at `path`, in `order` (event ids as recorded) and renumbered,
    the run's input moved from `recorded_baseline` (checked) to `baseline`: to replay an incident in the grouping
    another execution would have recorded, or as a later baseline would have written it. A command belongs to the
    workflow task completed before it."""
    body = json.loads(path.read_text())
    by_id = {int(event["eventId"]): event for event in body["events"]}
    events = [copy.deepcopy(by_id[event_id]) for event_id in order]
    renumbered = {old: new for new, old in enumerate(order, start=1)}
    completed = 0
    for event in events:
        event["eventId"] = str(renumbered[int(event["eventId"])])
        attributes = next(value for key, value in event.items() if key.endswith("Attributes"))
        if event["eventType"] == "EVENT_TYPE_WORKFLOW_TASK_COMPLETED":
            completed = int(event["eventId"])
        for key in ("scheduledEventId", "startedEventId"):
            if key in attributes:
                attributes[key] = str(renumbered[int(attributes[key])])
        if "workflowTaskCompletedEventId" in attributes:
            attributes["workflowTaskCompletedEventId"] = str(completed)
    started = events[0]["workflowExecutionStartedEventAttributes"]["input"]["payloads"][0]
    run_input = payload(started)
    assert run_input["baseline"] == recorded_baseline, f"recorded under baseline {recorded_baseline}"
    run_input["baseline"] = baseline
    set_payload(started, run_input)
    return str(body["workflowId"]), events
