"""The fleet gauges of pending terminationDelay deadlines, read from the replicas' memos in one visibility listing:
the real ReplicaWorkflow on a real Temporal dev server (scripted activities stand in for Kubernetes, as in
test_replica_workflow.py) writes its deadlines to its memo when they change, and worker/fleet.py reads them without
a status query; a run begun before the memo (a stand-in registered under the replica workflow's type, in phase
Breached with no memo) is still asked its status."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import REGISTRY
from temporalio import workflow
from temporalio.client import Client
from temporalio.common import SearchAttributePair, TypedSearchAttributes
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from grove.termination import Scope
from localstack.temporal import TemporalDevServer
from tests.e2e.harness import await_for
from tests.workflows.test_replica_workflow import _EXECUTOR, ScriptedCluster, _pcs, _status, _until
from worker import fleet
from worker.history_activities import patches_in
from workflows import contract
from workflows.messages import (
    DeadlineMemo,
    DeadlineStatus,
    Nudge,
    Phase,
    ReplicaInput,
    ReplicaRef,
    ReplicaStatus,
)
from workflows.replica import DEADLINE_MEMO_PATCH, ReplicaWorkflow

pytestmark = pytest.mark.stack  # starts a real Temporal dev server of its own (no Kubernetes)

OLDER_DUE = datetime(2099, 1, 1, tzinfo=UTC)
NEVER_DUE = timedelta(hours=1)  # no deadline falls due within a test


@workflow.defn(name=contract.REPLICA_WORKFLOW)
class OlderReplica:
    """A replica run begun before the deadline memo: Breached, one deadline, and no memo; answers its status."""

    def __init__(self) -> None:
        self._ref: ReplicaRef | None = None

    @workflow.run
    async def run(self, ref: ReplicaRef) -> None:
        self._ref = ref
        await workflow.wait_condition(lambda: False)

    @workflow.query(name=contract.STATUS_QUERY)
    def status(self) -> ReplicaStatus:
        assert self._ref is not None
        deadline = DeadlineStatus(scope=Scope.PCS_REPLICA, target=f"{self._ref.pcs}-0", breach_start=OLDER_DUE,
                                  delay=timedelta(hours=1), due_at=OLDER_DUE, cause="scripted")
        return ReplicaStatus(ref=self._ref, phase=Phase.BREACHED, paused=False, incarnation=1, deadlines=(deadline,))


def _gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value(name)


async def _reading(client: Client, scope: str, accept: Callable[[fleet.DeadlineReading], bool],
                   what: str) -> fleet.DeadlineReading:
    """Visibility is eventually consistent: refresh the gauges until `accept` takes the reading."""
    async def accepted() -> fleet.DeadlineReading | None:
        reading = await fleet.refresh(client, scope)
        return reading if accept(reading) else None

    found: fleet.DeadlineReading = await await_for(accepted, timeout=20, interval=0.2, what=what)
    return found


def _memo_writes(events: list) -> int:  # type: ignore[type-arg]
    return sum(1 for e in events if e.HasField("workflow_properties_modified_event_attributes"))


async def test_a_breach_keeps_its_deadline_in_the_memo_and_the_fleet_gauges_read_it_without_a_query(
        dev_server: TemporalDevServer) -> None:
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
    scope, queue, older_queue = (f"memo-{uuid.uuid4().hex[:8]}" for _ in range(3))
    cluster = ScriptedCluster(_pcs("memo", NEVER_DUE))
    ref = ReplicaRef(namespace=scope, pcs=cluster.topology.pcs, pcs_uid=uuid.uuid4().hex, replica=0)
    replica_worker = Worker(client, task_queue=queue, workflows=[ReplicaWorkflow], activities=cluster.activities(),
                            activity_executor=_EXECUTOR)
    older_worker = Worker(client, task_queue=older_queue, workflows=[OlderReplica],
                          workflow_runner=UnsandboxedWorkflowRunner())
    async with replica_worker, older_worker:
        handle = await client.start_workflow(
            ReplicaWorkflow.run, ReplicaInput(ref=ref), id=ref.workflow_id, task_queue=queue,
            search_attributes=TypedSearchAttributes([SearchAttributePair(contract.GROVE_NAMESPACE, scope)]))
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        cluster.ready = 1  # a breach
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: s.phase is Phase.BREACHED and len(s.deadlines) == 1)
        due = (await _status(handle)).deadlines[0].due_at

        reading = await _reading(client, scope,
                                 lambda r: r.from_memo == 1 and _gauge("grove_temporal_pending_deadlines") == 1,
                                 "the Breached replica listed with its memo")
        assert reading == fleet.DeadlineReading(from_memo=1, queried=0), "nothing asked: the memo said"
        until_due = _gauge("grove_temporal_next_deadline_seconds")
        assert until_due is not None and abs(until_due - (due - datetime.now(UTC)).total_seconds()) < 5
        description = await handle.describe()
        assert await description.memo_value(contract.DEADLINE_MEMO, type_hint=DeadlineMemo) == \
            DeadlineMemo(count=1, next_due=due)

        # A run begun before the memo is asked its status, and counted beside the memo's.
        older = ReplicaRef(namespace=scope, pcs="older", pcs_uid=uuid.uuid4().hex, replica=0)
        attributes = TypedSearchAttributes([SearchAttributePair(contract.GROVE_NAMESPACE, scope),
                                            SearchAttributePair(contract.GROVE_PHASE, Phase.BREACHED.value)])
        older_handle = await client.start_workflow(OlderReplica.run, older, id=older.workflow_id,
                                                   task_queue=older_queue, search_attributes=attributes)
        reading = await _reading(client, scope, lambda r: r.queried == 1, "the older run listed")
        assert reading == fleet.DeadlineReading(from_memo=1, queried=1)
        assert _gauge("grove_temporal_pending_deadlines") == 2
        assert _gauge("grove_temporal_next_deadline_seconds") == pytest.approx(until_due, abs=5), "the earlier one"
        await older_handle.terminate("test over")

        # Healed: the memo says no deadline; two writes in all, each in the task that changed the deadlines.
        cluster.ready = 2
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE and not s.deadlines)
        description = await handle.describe()
        assert await description.memo_value(contract.DEADLINE_MEMO, type_hint=DeadlineMemo) == DeadlineMemo(count=0)
        events = list((await handle.fetch_history()).events)
        assert _memo_writes(events) == 2
        reading = await _reading(client, scope, lambda r: _gauge("grove_temporal_pending_deadlines") == 0,
                                 "no deadline left")
        assert reading == fleet.DeadlineReading(from_memo=0, queried=0)
        await handle.terminate("test over")


async def test_a_replica_that_never_breaches_writes_no_memo(dev_server: TemporalDevServer) -> None:
    client = await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
    queue = f"memo-{uuid.uuid4().hex[:8]}"
    cluster = ScriptedCluster(_pcs("calm", NEVER_DUE))
    ref = ReplicaRef(namespace=queue, pcs=cluster.topology.pcs, pcs_uid=uuid.uuid4().hex, replica=0)
    async with Worker(client, task_queue=queue, workflows=[ReplicaWorkflow], activities=cluster.activities(),
                      activity_executor=_EXECUTOR):
        handle = await client.start_workflow(ReplicaWorkflow.run, ReplicaInput(ref=ref), id=ref.workflow_id,
                                             task_queue=queue)
        await _until(handle, lambda s: s.phase is Phase.AVAILABLE)
        events = list((await handle.fetch_history()).events)
        await handle.terminate("test over")
    assert _memo_writes(events) == 0, "no event for a replica with no deadline"
    assert DEADLINE_MEMO_PATCH in patches_in(events), "taken by the run's baseline marker, with no marker of its own"
