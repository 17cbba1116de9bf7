"""Gang scheduling in the loop (kube backend, DESIGN §4b): a PodCliqueSet's base gang binds all together or not
at all, scaled gangs are each atomic and independent, termination gives a recreated gang a PodGroup of its own;
with the `none` backend the old pod-by-pod placement is back.

Capacity is controlled with nodes of the test's own (2-CPU pods, a node label the pods select); the stack's
other nodes never see these pods. Bound pods are read from the real objects, every half second while it matters.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
from kubernetes.client import CoreV1Api
from temporalio.client import Client

from activities.kubeapi import JSON, NATIVE_PODGROUPS, PODS
from grove import names
from localstack.kwok import NodeShape
from tests.e2e.conftest import running_worker
from tests.e2e.harness import Cluster, Replica, clique, is_gated, is_scheduled, pcs_manifest, wait_for
from workflows.messages import ControlResult, ForceTerminateRequest, Phase

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack
    from localstack.workerproc import WorkerProcess

HOLD_S = 30  # how long "nothing bound" must last


class Capacity:
    """Nodes of this test only: `grove-temporal.io/test-node=<namespace>`, deleted afterwards."""

    def __init__(self, stack: LocalStack, kube: ApiClient, namespace: str) -> None:
        self.stack, self.kube = stack, kube
        self.label = {"grove-temporal.io/test-node": namespace}
        self.nodes: list[str] = []

    def add(self, cpu: int) -> str:
        (node,) = self.stack.add_nodes(1, NodeShape(cpu=str(cpu), memory="64Gi", pods=110, gpus=0),
                                       labels=self.label)
        self.nodes.append(node)
        return node

    def remove_all(self) -> None:
        core = CoreV1Api(self.kube)
        for node in self.nodes:
            core.delete_node(node)


@pytest.fixture
def capacity(stack: LocalStack, kube: ApiClient, namespace: str) -> Iterator[Capacity]:
    nodes = Capacity(stack, kube, namespace)
    try:
        yield nodes
    finally:
        nodes.remove_all()


def two_cpu(name: str, replicas: int, label: dict[str, str]) -> JSON:
    spec = clique(name, replicas, replicas, cpu="2")
    spec["spec"]["podSpec"]["nodeSelector"] = dict(label)
    return spec


def blocker(label: dict[str, str]) -> JSON:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "blocker"},
            "spec": {"nodeSelector": dict(label), "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"requests": {"cpu": "2", "memory": "16Mi"}}}]}}


def bound_by_gang(cluster: Cluster) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in cluster.pods(f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}"):
        gang = pod["metadata"]["labels"][names.LABEL_PODGANG]
        counts[gang] = counts.get(gang, 0) + (1 if is_scheduled(pod) else 0)
    return counts


def bind_times(cluster: Cluster, pods: set[str], timeout: float = 60) -> dict[str, float]:
    """When (monotonic) each pod was first seen bound, polled every 50 ms."""
    seen: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while set(seen) != pods and time.monotonic() < deadline:
        for pod in cluster.pods():
            if pod["metadata"]["name"] in pods and is_scheduled(pod):
                seen.setdefault(pod["metadata"]["name"], time.monotonic())
        time.sleep(0.05)
    assert set(seen) == pods, f"bound: {sorted(seen)} of {sorted(pods)}"
    return seen


def released(cluster: Cluster, count: int) -> list[JSON] | None:
    """Our pods, when there are `count` of them and none carries our gate any more."""
    pods = cluster.pods(f"{names.LABEL_MANAGED_BY}={names.MANAGED_BY}")
    return pods if len(pods) == count and not any(is_gated(p) for p in pods) else None


def native_podgroups(cluster: Cluster) -> dict[str, JSON]:
    return {o["metadata"]["name"]: o for o in cluster.kube.list_items(NATIVE_PODGROUPS, cluster.namespace)
            if not o["metadata"].get("deletionTimestamp")}


def six_pod_pcs(cluster: Cluster, label: dict[str, str], annotations: dict[str, str] | None = None) -> JSON:
    return pcs_manifest("gang", cluster.namespace, cliques=[two_cpu("frontend", 2, label), two_cpu("api", 4, label)],
                        annotations=annotations)


async def test_base_gang_binds_nothing_until_all_six_fit_then_all_together(
        cluster: Cluster, worker_process: WorkerProcess, capacity: Capacity, temporal_client: Client) -> None:
    capacity.add(cpu=12)
    cluster.kube.create(PODS, cluster.namespace, blocker(capacity.label))
    wait_for(lambda: all(is_scheduled(p) for p in cluster.pods()), timeout=30, what="blocker bound")
    cluster.apply(six_pod_pcs(cluster, capacity.label))  # 6 x 2 CPU; 10 CPU free: five would fit

    pods = wait_for(lambda: released(cluster, 6), timeout=60, what="6 pods, gates released")
    (podgroup,) = native_podgroups(cluster).values()
    gang = cluster.pod_gangs()["gang-0"]
    assert podgroup["metadata"]["name"] == names.native_podgroup_name("gang-0", gang["metadata"]["uid"])
    assert podgroup["spec"]["schedulingPolicy"] == {"gang": {"minCount": 6}}
    assert podgroup["metadata"]["ownerReferences"][0]["uid"] == gang["metadata"]["uid"]
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {podgroup["metadata"]["name"]}

    # Released by us, held by the scheduler: not one pod binds while the sixth cannot.
    until = time.monotonic() + HOLD_S
    while time.monotonic() < until:
        assert bound_by_gang(cluster).get("gang-0", 0) == 0, "part of the base gang was placed"
        time.sleep(0.5)
    replica = Replica(temporal_client, cluster, "gang")
    status = await replica.status()
    assert status.phase is Phase.SCHEDULING and not status.base_gang_ready
    assert set(status.waiting_for) == {"gang-0-frontend", "gang-0-api"}  # why, from `grove-temporal status`
    assert cluster.events("GatesReleased")

    cluster.kube.delete(PODS, cluster.namespace, "blocker")  # capacity freed: the whole gang fits
    seen = bind_times(cluster, {p["metadata"]["name"] for p in pods})
    assert max(seen.values()) - min(seen.values()) < 2.0, "the gang bound together"
    await replica.wait_phase(Phase.AVAILABLE, timeout=60)


async def test_two_scaled_gangs_are_each_atomic_and_independent(
        cluster: Cluster, worker_process: WorkerProcess, capacity: Capacity) -> None:
    label = capacity.label
    capacity.add(cpu=12)  # the base gang (6 CPU) and ONE scaled gang (6 CPU)
    cluster.apply(pcs_manifest(
        "sg", cluster.namespace, cliques=[two_cpu("leader", 1, label), two_cpu("worker", 2, label)],
        scaling_groups=[{"name": "prefill", "replicas": 3, "minAvailable": 1, "cliqueNames": ["leader", "worker"]}]))
    scaled = {"sg-0-prefill-0", "sg-0-prefill-1"}
    wait_for(lambda: bound_by_gang(cluster).get("sg-0") == 3, timeout=60, what="base gang bound")
    wait_for(lambda: len([p for p in cluster.pods() if not is_gated(p)]) == 9, timeout=60,
             what="scaled gangs released")
    assert set(native_podgroups(cluster)) == {
        names.native_podgroup_name(n, g["metadata"]["uid"]) for n, g in cluster.pod_gangs().items()}

    # Room for one scaled gang: one binds whole, the other not at all (pod by pod, 6 CPU would split them).
    winner: str = wait_for(lambda: next((g for g in scaled if bound_by_gang(cluster).get(g) == 3), None),
                           timeout=60, what="one scaled gang bound")
    (loser,) = scaled - {winner}
    until = time.monotonic() + HOLD_S / 2
    while time.monotonic() < until:
        counts = bound_by_gang(cluster)
        assert counts.get(winner) == 3 and counts.get(loser, 0) == 0, counts
        time.sleep(0.5)

    capacity.add(cpu=6)
    wait_for(lambda: bound_by_gang(cluster).get(loser) == 3, timeout=60, what="the other scaled gang bound")
    assert bound_by_gang(cluster) == {"sg-0": 3, winner: 3, loser: 3}


@pytest.fixture
def long_window_worker(stack: LocalStack, namespace: str, crds: list[str],
                       request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    """A worker whose status-only nudges wait ten minutes: only a change nudged at once moves a replica here."""
    with running_worker(stack, namespace, request,
                        extra_env={"GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS": "600000"}) as process:
        yield process


async def test_a_scaled_gangs_surplus_pod_goes_out_when_its_gang_binds(
        cluster: Cluster, long_window_worker: WorkerProcess) -> None:
    """A scaled PodClique's pod past its minAvailable keeps its gate until its own gang is scheduled. The binding
    that completes that gang is nudged at once (worker/watcher.py), so with the status window at ten minutes the
    surplus pod still goes out as soon as its gang binds; taken for status-only, it waited out the window."""
    cluster.apply(pcs_manifest(
        "sp", cluster.namespace, cliques=[clique("leader", 1, 1), clique("worker", 3, 2)],
        scaling_groups=[{"name": "prefill", "replicas": 2, "minAvailable": 1, "cliqueNames": ["leader", "worker"]}]))
    pods = wait_for(lambda: released(cluster, 8), timeout=60, what="all 8 pods released, the surplus ones too")
    scaled = [p for p in pods if p["metadata"]["labels"][names.LABEL_PODGANG] == "sp-0-prefill-0"]
    assert len(scaled) == 4  # leader, two required workers and the surplus one
    assert [p["metadata"]["name"] for p in scaled if "schedulingGroup" not in p["spec"]] == \
        ["sp-0-prefill-1-worker-2"], "only the surplus pod is outside the native gang"
    wait_for(lambda: bound_by_gang(cluster) == {"sp-0": 4, "sp-0-prefill-0": 4}, timeout=60, what="all bound")


async def test_termination_recreates_the_gang_with_a_podgroup_of_its_own(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("t", cluster.namespace, cliques=[clique("a", 2, 2), clique("b", 1, 1)]))
    wait_for(lambda: cluster.ready_pods(3), timeout=60, what="3 Ready pods")
    (before,) = native_podgroups(cluster)
    replica = Replica(temporal_client, cluster, "t")
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("t", 0))
    result = await handle.execute_update("force_terminate", ForceTerminateRequest(reason="test"),
                                         result_type=ControlResult)
    assert result.accepted, result.message
    after = wait_for(lambda: set(native_podgroups(cluster)) - {before} or None, timeout=60,
                     what="a new native PodGroup")
    (new_name,) = after
    pods = wait_for(lambda: cluster.ready_pods(3), timeout=60, what="recreated pods Ready")
    assert pods is not None
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {new_name}
    wait_for(lambda: before not in {o["metadata"]["name"] for o in
                                    cluster.kube.list_items(NATIVE_PODGROUPS, cluster.namespace)},
             timeout=60, what="the old PodGroup garbage-collected with its PodGang")
    status = await replica.wait_phase(Phase.AVAILABLE, timeout=60)
    assert status.terminations_total == 1


async def test_none_backend_places_pod_by_pod_as_before(
        cluster: Cluster, worker_process: WorkerProcess, capacity: Capacity) -> None:
    capacity.add(cpu=10)  # five of six
    cluster.apply(six_pod_pcs(cluster, capacity.label, {names.ANNOTATION_SCHEDULER_BACKEND: names.BACKEND_NONE}))
    wait_for(lambda: bound_by_gang(cluster).get("gang-0") == 5, timeout=60, what="five pods bound, pod by pod")
    time.sleep(3)
    pods = cluster.pods()
    assert sum(1 for p in pods if is_scheduled(p)) == 5 and not any(is_gated(p) for p in pods)
    assert not any("schedulingGroup" in p["spec"] for p in pods)
    assert native_podgroups(cluster) == {}


def test_kai_backend_names_the_kai_scheduler(cluster: Cluster, worker_process: WorkerProcess) -> None:
    cluster.apply(pcs_manifest("k", cluster.namespace, cliques=[clique("a", 2, 2)],
                               annotations={names.ANNOTATION_SCHEDULER_BACKEND: names.BACKEND_KAI}))
    pods = wait_for(lambda: released(cluster, 2), timeout=60, what="2 pods released")
    assert {p["spec"]["schedulerName"] for p in pods} == {names.KAI_SCHEDULER_NAME}
    assert not any(is_scheduled(p) for p in pods)  # no KAI here: nobody places them
    assert native_podgroups(cluster) == {}
    assert set(cluster.pod_gangs()) == {"k-0"}  # KAI reads the Grove PodGang
