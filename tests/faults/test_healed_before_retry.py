"""A gang termination whose first attempt failed, and whose breach healed before the retry, deletes nothing.

The case: the workflow reads the replica, finds a breach past its deadline and schedules terminate_gang; the attempt
meets kube-apiserver down; while it is down a pod recovers (its kubelet reports Ready once kube-apiserver is back).
The retry used to delete on the workflow's read from before the outage. Now it reads the replica again and, finding
the breach healed, deletes nothing and says so (result, Event, log); the run counts no termination.

The outage cannot be made to fall between the workflow's read and the attempt's delete (milliseconds apart), so the
first attempt stands for it: it heals the pod (KWOK reports it Ready again), then fails as an unreachable
kube-apiserver would. Everything else is real: the replica workflow on the Temporal dev server, the activities
against kube-apiserver, KWOK playing the kubelets, Temporal's retry of the attempt.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.exceptions import ApplicationError
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.kubeapi import Kube
from activities.replica import UNREACHABLE
from tests.e2e.harness import Cluster, Replica, await_for, clique, pcs_manifest, wait_for
from worker.app import WORKFLOWS, activities_for
from workflows.contract import TERMINATE_GANG
from workflows.messages import Phase, ReplicaInput, ReplicaRef, TerminateRequest, TerminateResult

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from temporalio.client import Client

pytestmark = pytest.mark.stack

DELAY_S = 2


def _heal_then_fail_once(real: Callable[[TerminateRequest], TerminateResult], heal: Callable[[], None]) -> Any:
    @activity.defn(name=TERMINATE_GANG)
    def terminate_gang(request: TerminateRequest) -> TerminateResult:
        if activity.info().attempt == 1:
            heal()  # meanwhile, the pod recovered
            raise ApplicationError("kube-apiserver unreachable (stands for an outage)", type=UNREACHABLE,
                                   next_retry_delay=timedelta(milliseconds=100))
        return real(request)
    return terminate_gang


async def test_a_retried_termination_whose_breach_healed_meanwhile_deletes_nothing(
        kube: ApiClient, crds: list[str], namespace: str, temporal_client: Client) -> None:
    cluster = Cluster(Kube(kube), namespace)
    created = cluster.apply(pcs_manifest("healed", namespace, termination_delay=f"{DELAY_S}s",
                                         cliques=[clique("frontend", 2, 2)]))
    ref = ReplicaRef(namespace=namespace, pcs="healed", pcs_uid=created["metadata"]["uid"], replica=0)

    def heal() -> None:
        cluster.fail_readiness("healed-0-frontend-1", failing=False)
        wait_for(lambda: cluster.ready_pods(2), timeout=30, what="the pod Ready again")

    every = activities_for(cluster.kube, temporal_client, count_pcs=False)
    activities = [a for a in every if getattr(a, "__name__", "") != "terminate_gang"]
    real = next(a for a in every if getattr(a, "__name__", "") == "terminate_gang")
    queue = f"healed-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(max_workers=8) as executor:
        async with Worker(temporal_client, task_queue=queue, workflows=WORKFLOWS,
                          activities=[*activities, _heal_then_fail_once(real, heal)], activity_executor=executor,
                          workflow_runner=UnsandboxedWorkflowRunner()):
            # No watcher runs here: the run looks again every second by its safety resync instead of on nudges.
            await temporal_client.start_workflow(
                "ReplicaWorkflow", ReplicaInput(ref=ref, safety_resync=timedelta(seconds=1)), id=ref.workflow_id,
                task_queue=queue)
            replica = Replica(temporal_client, cluster, "healed")
            await replica.wait_phase(Phase.AVAILABLE, timeout=90)
            uid = cluster.live_pclq_uids()["healed-0-frontend"]
            cluster.fail_readiness("healed-0-frontend-1")
            await replica.wait(lambda s: bool(s.deadlines), timeout=30, what="the breach's deadline")
            history = await _until_terminate_completed(replica)
            status = await replica.wait_phase(Phase.AVAILABLE, timeout=30)

    assert status.terminations_total == 0, "nothing was terminated"
    assert cluster.live_pclq_uids()["healed-0-frontend"] == uid, "the PodClique was not deleted"
    attempts = [e.activity_task_started_event_attributes.attempt for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED]
    assert 2 in attempts, attempts
    skipped = cluster.events("TerminationSkipped")
    assert len(skipped) == 1 and "healed-0-frontend 2/2 Ready" in skipped[0]["message"], skipped
    assert not cluster.events("GangTerminated")


async def _until_terminate_completed(replica: Replica) -> Any:
    async def completed() -> Any:
        history = await replica.handle.fetch_history()
        terminations = {e.event_id for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                        and e.activity_task_scheduled_event_attributes.activity_type.name == TERMINATE_GANG}
        done = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
                and e.activity_task_completed_event_attributes.scheduled_event_id in terminations]
        return history if done else None

    return await await_for(completed, timeout=60, what="terminate_gang completed")
