"""S3: a standalone PodClique breached past terminationDelay gang-terminates its whole PCS replica, which is then
recreated; the other replicas are untouched."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio.client import Client

from tests.e2e.harness import Cluster, WorkerProcess, await_for, clique, pcs_manifest, wait_for
from workflows.messages import Phase, ReplicaStatus

DELAY_S = 4


async def test_s3_standalone_breach_terminates_and_recreates_the_replica(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("svc", cluster.namespace, replicas=2, termination_delay=f"{DELAY_S}s",
                               cliques=[clique("frontend", 2, 2), clique("api", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(8), timeout=60, what="8 Ready pods")
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("svc", 0))

    async def phase_is(phase: Phase) -> ReplicaStatus | None:
        status: ReplicaStatus = await handle.query("status", result_type=ReplicaStatus)
        return status if status.phase is phase else None

    await await_for(lambda: phase_is(Phase.AVAILABLE), timeout=15, what="replica 0 Available")
    before = cluster.live_pclq_uids()
    replica1_pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods("grove.io/podcliqueset-replica-index=1")}

    broke_at = datetime.now(UTC)
    cluster.fail_readiness("svc-0-frontend-1")  # frontend needs 2 of 2 Ready: breached
    breached: ReplicaStatus = await await_for(lambda: phase_is(Phase.BREACHED), timeout=15, what="breach seen")
    deadline = breached.deadlines[0]
    assert deadline.target == "svc-0-frontend" and deadline.scope.value == "pcs-replica"
    assert deadline.due_at >= deadline.breach_start >= broke_at.replace(microsecond=0)

    # Terminated: both PodCliques of replica 0 get new UIDs (healthy api too), replica 1 keeps its pods.
    wait_for(lambda: all(cluster.live_pclq_uids().get(n) not in (None, before[n]) for n in ("svc-0-frontend", "svc-0-api")),
             timeout=DELAY_S + 30, what="replica 0 PodCliques recreated")
    status: ReplicaStatus = await handle.query("status", result_type=ReplicaStatus)
    assert status.terminations_total == 1 and status.incarnation == 2
    record = status.terminations[0]
    assert record.scope.value == "pcs-replica" and set(record.cliques) == {"svc-0-frontend", "svc-0-api"}
    assert record.at >= deadline.due_at, "never early"
    after = cluster.live_pclq_uids()
    assert after["svc-1-frontend"] == before["svc-1-frontend"] and after["svc-1-api"] == before["svc-1-api"]
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in
            cluster.pods("grove.io/podcliqueset-replica-index=1")} == replica1_pods
    wait_for(lambda: cluster.ready_pods(8), timeout=60, what="replica 0 back to Ready")
    events = cluster.events("GangTerminated")
    assert len(events) == 1 and "svc-0-frontend" in events[0]["message"]
