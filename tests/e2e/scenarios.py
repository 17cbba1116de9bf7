"""Bodies of the lifecycle scenarios S1–S3, shared by the tests that run them with an admin worker
(test_gate_release.py, test_gang_termination.py) and with a worker under deploy/'s ServiceAccount (test_rbac.py).

Each takes the test namespace's Cluster (and a Temporal client where it queries the workflow) and asserts on the
real objects and the workflow's own answers; which identity the worker runs as is the caller's business.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from temporalio.client import Client, WorkflowHandle

from tests.e2e.harness import Cluster, await_for, clique, is_gated, is_scheduled, pcs_manifest, wait_for
from worker.history_activities import decoded, local_activity
from workflows.contract import ENSURE_REPLICA_RELEASING, RELEASE_GATES
from workflows.messages import EnsureResult, Phase, ReleaseResult, ReplicaStatus

S3_DELAY_S = 4


async def s1_standalone_cliques_form_the_base_gang(cluster: Cluster,
                                                   temporal_client: Client) -> WorkflowHandle[Any, Any]:
    """Returns the replica workflow's handle (its history is the "start to Available" replay fixture)."""
    cluster.apply(pcs_manifest("web", cluster.namespace, replicas=1,
                               cliques=[clique("frontend", 2, 1), clique("api", 3, 2)]))
    pods = wait_for(lambda: cluster.ready_pods(5), timeout=60, what="5 Ready pods")
    assert not any(is_gated(p) for p in pods)
    gangs = cluster.pod_gangs()
    assert set(gangs) == {"web-0"}, "standalone cliques form exactly one base gang"
    groups = {g["name"]: g for g in gangs["web-0"]["spec"]["podgroups"]}
    assert {n: g["minReplicas"] for n, g in groups.items()} == {"web-0-frontend": 1, "web-0-api": 2}
    assert {r["name"] for r in groups["web-0-api"]["podReferences"]} == {"web-0-api-0", "web-0-api-1", "web-0-api-2"}
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert labels["grove.io/podgang"] == "web-0"
        assert pod["spec"]["hostname"] == pod["metadata"]["name"] and pod["spec"]["subdomain"] == "web-0"
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("web", 0))

    async def available() -> ReplicaStatus | None:
        status: ReplicaStatus = await handle.query("status", result_type=ReplicaStatus)
        return status if status.phase is Phase.AVAILABLE else None

    status = await await_for(available, timeout=15, what="phase Available")
    assert status.base_gang_ready and all(c.was_available for c in status.cliques)
    # The base gang went to the scheduler from the activity that made it (on the kube backend its pods beyond each
    # PodClique's minAvailable wait for the gang to be scheduled: a release_gates later); each pod released once
    by_ensure, later = await _releases_in_history(handle)
    assert by_ensure and not set(by_ensure) & set(later), (by_ensure, later)
    assert by_ensure | later == {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}, (by_ensure, later)
    assert len(cluster.events("GatesReleased")) == 1 + bool(later)
    return handle


async def _releases_in_history(handle: WorkflowHandle[Any, Any]) -> tuple[dict[str, str], dict[str, str]]:
    """Pod -> UID released by ensure_replica_releasing, and by release_gates, as the history records them. A run of
    today's workflow releases gates and materialises in local activities (one marker each), never in a scheduled
    activity."""
    scheduled: dict[int, str] = {}
    by_ensure: dict[str, str] = {}
    later: dict[str, str] = {}
    for event in (await handle.fetch_history()).events:
        local = local_activity(event)
        if local is not None and local.name == RELEASE_GATES and local.result is not None:
            later.update(decoded(local.result, ReleaseResult).released_uids)
        elif local is not None and local.name == ENSURE_REPLICA_RELEASING and local.result is not None:
            by_ensure.update(decoded(local.result, EnsureResult).released_base)
        elif event.HasField("activity_task_scheduled_event_attributes"):
            name = event.activity_task_scheduled_event_attributes.activity_type.name
            assert name not in (RELEASE_GATES, ENSURE_REPLICA_RELEASING), \
                f"event {event.event_id}: {name} scheduled, not run locally"
            scheduled[event.event_id] = name
        elif event.HasField("activity_task_completed_event_attributes"):
            done = event.activity_task_completed_event_attributes
            if scheduled.get(done.scheduled_event_id) == ENSURE_REPLICA_RELEASING:
                by_ensure.update(decoded(done.result, EnsureResult).released_base)
    return by_ensure, later


def prefill(namespace: str, name: str, cpu: str = "10m") -> dict:
    return pcs_manifest(name, namespace, replicas=1,
                        cliques=[clique("leader", 1, 1, cpu), clique("worker", 2, 2, cpu)],
                        scaling_groups=[{"name": "prefill", "replicas": 5, "minAvailable": 3,
                                         "cliqueNames": ["leader", "worker"]}])


def s2_scaled_gangs_wait_for_the_base_gang(cluster: Cluster) -> None:
    cluster.apply(prefill(cluster.namespace, "p"))
    wait_for(lambda: cluster.ready_pods(15), timeout=90, what="all 15 pods Ready")
    gangs = cluster.pod_gangs()
    assert set(gangs) == {"p-0", "p-0-prefill-0", "p-0-prefill-1"}
    base_groups = {g["name"] for g in gangs["p-0"]["spec"]["podgroups"]}
    assert base_groups == {f"p-0-prefill-{j}-{c}" for j in range(3) for c in ("leader", "worker")}
    assert {g["name"] for g in gangs["p-0-prefill-1"]["spec"]["podgroups"]} == {"p-0-prefill-4-leader",
                                                                                "p-0-prefill-4-worker"}
    # Order, from the real objects: no scaled pod was scheduled before every base podgroup had its minimum.
    pods = cluster.pods()

    def scheduled_at(pod: dict) -> str:
        return next(c["lastTransitionTime"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")

    base = [p for p in pods if p["metadata"]["labels"]["grove.io/podgang"] == "p-0"]
    scaled = [p for p in pods if p["metadata"]["labels"]["grove.io/podgang"] != "p-0"]
    assert len(base) == 9 and len(scaled) == 6
    assert min(scheduled_at(p) for p in scaled) >= max(scheduled_at(p) for p in base)


def s2_scaled_pods_stay_gated_while_the_base_gang_cannot_be_scheduled(cluster: Cluster) -> None:
    # Each pod asks for more CPU than the whole fake cluster has: the base gang can never be scheduled.
    cluster.apply(prefill(cluster.namespace, "big", cpu="1000"))
    wait_for(lambda: len(cluster.pods()) == 15, timeout=60, what="15 pods created")
    wait_for(lambda: all(not is_gated(p) for p in cluster.pods()
                         if p["metadata"]["labels"]["grove.io/podgang"] == "big-0"), timeout=30,
             what="base pods released")
    time.sleep(5)  # give a wrong implementation every chance to release the scaled pods
    pods = cluster.pods()
    scaled = [p for p in pods if p["metadata"]["labels"]["grove.io/podgang"] != "big-0"]
    assert len(scaled) == 6 and all(is_gated(p) for p in scaled)
    assert not any(is_scheduled(p) for p in pods)


async def s3_standalone_breach_terminates_and_recreates_the_replica(cluster: Cluster,
                                                                   temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("svc", cluster.namespace, replicas=2, termination_delay=f"{S3_DELAY_S}s",
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
             timeout=S3_DELAY_S + 30, what="replica 0 PodCliques recreated")
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
