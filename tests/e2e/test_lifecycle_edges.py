"""Edges of a replica's life that the S-scenarios do not reach: a gate that is not ours, a clique scaled down, the
PodCliqueSet deleted and created again under the same name, the workflow task timeout a worker starts replicas with."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError

from activities.kubeapi import PODCLIQUES, PODS
from grove import names
from tests.e2e.conftest import running_worker
from tests.e2e.harness import (
    Cluster,
    Replica,
    WorkerProcess,
    await_for,
    clique,
    is_ready,
    pcs_manifest,
    wait_for,
)
from workflows.contract import reconciler_workflow_id
from workflows.messages import Phase, ReplicaOutcome

if TYPE_CHECKING:
    import pytest

    from localstack.stack import LocalStack

FOREIGN_GATE = "example.com/quota-admission"


def _gate_names(pod: dict) -> list[str]:
    return [g["name"] for g in (pod.get("spec") or {}).get("schedulingGates") or []]


async def test_release_removes_only_our_gate_and_a_foreign_gate_keeps_the_pod_unscheduled(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    app = clique("app", 1, 1)
    app["spec"]["podSpec"]["schedulingGates"] = [{"name": FOREIGN_GATE}]
    cluster.apply(pcs_manifest("gates", cluster.namespace, cliques=[app]))
    pod = wait_for(lambda: next((p for p in cluster.pods() if _gate_names(p) == [FOREIGN_GATE]), None),
                   timeout=60, what="our gate released, the foreign one kept")
    name = pod["metadata"]["name"]
    await asyncio.sleep(2)
    current = cluster.kube.get(PODS, cluster.namespace, name)
    assert current is not None and _gate_names(current) == [FOREIGN_GATE]
    assert not (current.get("spec") or {}).get("nodeName"), "a pod with a gate left is never scheduled"
    assert names.SCHEDULING_GATE not in _gate_names(current)

    # The gate's owner lets it go: the pod is scheduled and Ready, and the replica becomes Available.
    cluster.kube.patch(PODS, cluster.namespace, name, {"spec": {"schedulingGates": []}})
    wait_for(lambda: cluster.ready_pods(1), timeout=60, what="the pod Ready once the foreign gate is gone")
    await Replica(temporal_client, cluster, "gates").wait_phase(Phase.AVAILABLE)


async def test_a_replica_workflow_is_started_with_the_task_timeout_its_worker_was_given(
        cluster: Cluster, stack: LocalStack, temporal_client: Client, request: pytest.FixtureRequest) -> None:
    with running_worker(stack, cluster.namespace, request, extra_env={"GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S": "17"}):
        cluster.apply(pcs_manifest("timeout", cluster.namespace, cliques=[clique("app", 1, 1)]))
        replica = Replica(temporal_client, cluster, "timeout")
        await replica.wait_phase(Phase.AVAILABLE)
        history = await replica.handle.fetch_history()
    started = history.events[0].workflow_execution_started_event_attributes
    assert started.workflow_task_timeout.ToTimedelta().total_seconds() == 17


async def test_a_clique_scaled_down_loses_its_highest_pod_indices_first(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    manifest = pcs_manifest("shrinkpods", cluster.namespace, cliques=[clique("app", 3, 1)])
    cluster.apply(manifest)
    wait_for(lambda: cluster.ready_pods(3), timeout=60, what="3 Ready pods")
    first = {p["metadata"]["name"]: p["metadata"]["uid"] for p in cluster.pods()}
    assert sorted(first) == [f"shrinkpods-0-app-{i}" for i in range(3)]

    # kubectl scale pclq shrinkpods-0-app --replicas=1 (the PodClique owns its count after creation)
    cluster.kube.patch(PODCLIQUES, cluster.namespace, "shrinkpods-0-app", {"spec": {"replicas": 1}},
                       subresource="scale")
    wait_for(lambda: [p["metadata"]["name"] for p in cluster.pods()
                      if not p["metadata"].get("deletionTimestamp")] == ["shrinkpods-0-app-0"],
             timeout=60, what="only pod index 0 left")
    kept = cluster.kube.get(PODS, cluster.namespace, "shrinkpods-0-app-0")
    assert kept is not None and kept["metadata"]["uid"] == first["shrinkpods-0-app-0"] and is_ready(kept)


async def test_a_deleted_pcs_ends_its_workflows_and_a_new_one_of_the_same_name_gets_fresh_ones(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    manifest = pcs_manifest("again", cluster.namespace, replicas=2, cliques=[clique("app", 1, 1)])
    cluster.apply(manifest)
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")
    old_ids = [cluster.workflow_id("again", i) for i in (0, 1)]
    for index in (0, 1):
        await Replica(temporal_client, cluster, "again", index).wait_phase(Phase.AVAILABLE)

    cluster.delete_pcs("again")
    for workflow_id in old_ids:
        handle = temporal_client.get_workflow_handle(workflow_id, result_type=ReplicaOutcome)
        outcome = await asyncio.wait_for(handle.result(), timeout=60)
        assert outcome.phase is Phase.DELETED, outcome
    wait_for(lambda: cluster.inventory() == {}, timeout=90, what="every object garbage-collected")

    cluster.apply(manifest)
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods of the new PodCliqueSet")
    new_ids = [cluster.workflow_id("again", i) for i in (0, 1)]
    assert not set(new_ids) & set(old_ids), "a new UID, new workflows"
    for index in (0, 1):
        status = await Replica(temporal_client, cluster, "again", index).wait_phase(Phase.AVAILABLE)
        assert status.incarnation == 1 and status.terminations_total == 0


async def test_a_terminated_reconciler_is_started_again_and_new_podcliquesets_still_get_workflows(
        cluster: Cluster, stack: LocalStack, temporal_client: Client, tmp_path: Path) -> None:
    """An operator terminates the reconciler in the UI (or Temporal loses it): the workers start it again, so a
    PodCliqueSet applied afterwards still gets its replica workflow without any worker restart."""
    worker = WorkerProcess(kubeconfig=Path(stack.kubeconfig), temporal_address=stack.temporal_address,
                           namespace=cluster.namespace, log_dir=tmp_path,
                           extra_args=["--reconciler-check-seconds", "2"]).start()
    try:
        handle = temporal_client.get_workflow_handle(reconciler_workflow_id(cluster.namespace))

        async def running_run() -> str | None:
            try:
                described = await handle.describe()
            except RPCError:
                return None
            return described.run_id if described.status == WorkflowExecutionStatus.RUNNING else None

        first = await await_for(running_run, timeout=60, what="the reconciler running")
        await handle.terminate(reason="test: an operator terminated it")

        async def restarted() -> str | None:
            run = await running_run()
            return run if run and run != first else None

        await await_for(restarted, timeout=30, what="the reconciler started again")
        cluster.apply(pcs_manifest("afterwards", cluster.namespace, cliques=[clique("app", 1, 1)]))
        await Replica(temporal_client, cluster, "afterwards").wait_phase(Phase.AVAILABLE, timeout=60)
        assert "reconciler workflow" in worker.logs() and "is terminated; starting it again" in worker.logs()
    finally:
        worker.stop()
