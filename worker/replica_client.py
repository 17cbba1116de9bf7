"""What the operator commands do, apart from printing: find replica workflows through Temporal visibility, ask
them for their status, and send them controls as updates (which report acceptance or the rejection reason).

A PCS is found by its search attributes (GroveNamespace, GrovePodCliqueSet), so the CLI needs no kubeconfig.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowHandle,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.service import RPCError, RPCStatusCode

from worker.stacks import choose_temporal_address
from workflows.contract import (
    FORCE_TERMINATE,
    PAUSE,
    RESUME,
    STATUS_QUERY,
    parse_replica_workflow_id,
    replica_query,
)
from workflows.messages import ControlResult, ForceTerminateRequest, PauseRequest, ReplicaStatus

T = TypeVar("T")


class OperatorError(Exception):
    """A request an operator made that cannot be carried out; the message says why, naming the argument."""


def default_temporal_address() -> str:
    """$TEMPORAL_ADDRESS, else the live local stack `grove-temporal run` recorded (worker/stacks.py), else the
    Temporal default; says on stderr which of several running stacks it chose."""
    choice = choose_temporal_address()
    if choice.note:
        print(f"note: {choice.note}", file=sys.stderr)
    return choice.address


@dataclass(frozen=True)
class ReplicaExecution:
    """One replica workflow execution as Temporal visibility lists it (not the workflow class, which is
    workflows.replica.ReplicaWorkflow)."""

    workflow_id: str
    namespace: str
    pcs: str
    pcs_uid: str
    replica: int
    running: bool
    phase: str
    paused: bool
    started: datetime | None


async def list_replicas(
    client: Client,
    *,
    namespace: str | None = None,
    pcs: str | None = None,
    phase: str | None = None,
    include_closed: bool = False,
) -> list[ReplicaExecution]:
    query = replica_query(namespace=namespace, pcs=pcs, phase=phase, running_only=not include_closed)
    found: list[ReplicaExecution] = []
    async for execution in client.list_workflows(query):
        key = parse_replica_workflow_id(execution.id)
        if key is None:
            continue
        attrs = execution.search_attributes
        found.append(
            ReplicaExecution(
                workflow_id=execution.id,
                namespace=key.namespace,
                pcs=key.pcs,
                pcs_uid=key.pcs_uid,
                replica=key.replica,
                running=execution.status == WorkflowExecutionStatus.RUNNING,
                phase=str((attrs.get("GrovePhase") or [""])[0]),
                paused=bool((attrs.get("GrovePaused") or [False])[0]),
                started=execution.start_time,
            )
        )
    found.sort(key=lambda w: (w.namespace, w.pcs, w.replica, not w.running))
    return found


async def find_replicas(client: Client, namespace: str, pcs: str, replica: int | None) -> list[ReplicaExecution]:
    """The running workflows of a PCS (one replica or all); OperatorError naming what does not exist."""
    running = await list_replicas(client, namespace=namespace, pcs=pcs)
    if not running:
        raise OperatorError(
            f"PodCliqueSet {namespace}/{pcs}: no running replica workflow "
            "(check the name and --namespace, that the PCS is applied, and that a worker is running)"
        )
    if replica is None:
        return running
    chosen = [w for w in running if w.replica == replica]
    if not chosen:
        have = ", ".join(str(w.replica) for w in running)
        raise OperatorError(f"--replica {replica}: PodCliqueSet {namespace}/{pcs} has replicas {have}")
    return chosen


async def _asked_again(call: Callable[[], Awaitable[T]], transient: Callable[[Exception], bool],
                       waits: tuple[float, ...]) -> T:
    """`call()`, made again after each of `waits` while it raises an error `transient` accepts; any other error, and
    the last attempt's, is raised."""
    for wait in (*waits, None):
        try:
            return await call()
        except Exception as err:
            if wait is None or not transient(err):
                raise
            await asyncio.sleep(wait)
    raise AssertionError("unreachable: the last attempt returns or raises")


# A status query that reached a run in the instant it continued as new was once answered with "[TMPRL1100]
# Nondeterminism error: Missing associated machine for LocalActivity(3)" (one fresh-clone CI run,
# tests/e2e/test_continue_as_new.py): the worker answered it by replaying the run that had just ended, and the replay
# failed. The workflow itself was not affected: its next run went on, and every run of such chains replays cleanly
# from its history (the same test, 21 times). Asked again, the query reaches the new run; a replay that fails every
# time still shows its error after these waits.
QUERY_RACE_RETRIES = (0.2, 0.5, 1.0)


def _query_raced(err: Exception) -> bool:
    return isinstance(err, WorkflowQueryFailedError) and "TMPRL1100" in str(err)


async def query_status(handle: WorkflowHandle[Any, Any], result_type: type, rpc_timeout: timedelta | None = None) -> Any:
    """The workflow's status query, asked again where it raced a continue-as-new (QUERY_RACE_RETRIES)."""
    return await _asked_again(lambda: handle.query(STATUS_QUERY, result_type=result_type, rpc_timeout=rpc_timeout),
                              _query_raced, QUERY_RACE_RETRIES)


async def replica_status(client: Client, workflow_id: str) -> ReplicaStatus:
    status: ReplicaStatus = await query_status(client.get_workflow_handle(workflow_id), ReplicaStatus)
    return status


# An update the server took into a workflow task that then failed is answered FAILED_PRECONDITION with a
# WorkflowNotReadyFailure: the workflow never accepted it, and its state is as before. Under a storm of signals a task
# that accepts a control and hands the run over (continue-as-new) is refused for the signals that came in meanwhile,
# and the control with it (one fresh-clone CI run in about sixty, tests/e2e/test_signal_storm.py). Sent again.
NOT_READY_RETRIES = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0)


async def _update(client: Client, workflow_id: str, name: str, arg: object | None) -> ControlResult:
    handle = client.get_workflow_handle(workflow_id)
    try:
        result: ControlResult = await _asked_again(
            lambda: handle.execute_update(name, *(() if arg is None else (arg,)), result_type=ControlResult),
            lambda err: isinstance(err, RPCError) and workflow_not_ready(err), NOT_READY_RETRIES)
        return result
    except WorkflowUpdateFailedError as err:
        cause = err.cause
        message = getattr(cause, "message", None) or str(cause or err)
        return ControlResult(accepted=False, message=message)
    except RPCError as err:
        raise OperatorError(f"{workflow_id}: {err.message}") from err


def workflow_not_ready(err: RPCError) -> bool:
    """The server's answer for an update whose workflow task failed before the workflow accepted it."""
    details = err.grpc_status.details if err.grpc_status is not None else []
    return err.status == RPCStatusCode.FAILED_PRECONDITION and any(
        detail.type_url.endswith("WorkflowNotReadyFailure") for detail in details)


async def pause(client: Client, workflow_id: str, reason: str) -> ControlResult:
    return await _update(client, workflow_id, PAUSE, PauseRequest(reason=reason))


async def resume(client: Client, workflow_id: str) -> ControlResult:
    return await _update(client, workflow_id, RESUME, None)


async def terminate(
    client: Client, workflow_id: str, reason: str, scaling_group: str | None, scaling_group_replica: int | None
) -> ControlResult:
    request = ForceTerminateRequest(
        reason=reason, scaling_group=scaling_group, scaling_group_replica=scaling_group_replica
    )
    return await _update(client, workflow_id, FORCE_TERMINATE, request)
