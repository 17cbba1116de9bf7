"""release_gates for a scaled gang reads the base gang again before it removes a gate: a snapshot that said
"scheduled" can be seconds old (fault run seed 12 round 11: the pod GC force-deleted a lost node's base pods between
the snapshot and the release). Against the real apiserver: the objects are created here, no worker runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from activities.kubeapi import PODCLIQUES, PODS, Kube, pod_gated
from grove import manifests, names
from tests.activities.objects import create_pcs
from workflows.messages import ReleaseRequest, ReplicaRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack


def _pcs(namespace: str) -> dict[str, Any]:
    def clique(name: str) -> dict[str, Any]:
        return {"name": name, "spec": {"roleName": name, "replicas": 1, "minAvailable": 1, "podSpec": {
            "containers": [{"name": name, "image": "registry.k8s.io/pause:3.10"}]}}}
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": "rc", "namespace": namespace},
            "spec": {"replicas": 1, "template": {"cliques": [clique("a"), clique("w")], "podCliqueScalingGroups": [
                {"name": "g", "replicas": 2, "minAvailable": 1, "cliqueNames": ["w"]}]}}}


def test_a_scaled_gate_stays_while_a_fresh_read_shows_the_base_gang_unscheduled(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.replica import ReplicaActivities

    client = Kube(kube)
    model, plan, pcs_obj, owner = create_pcs(client, namespace, _pcs(namespace))
    pods: dict[str, dict[str, Any]] = {}
    for pclq in plan.pod_cliques:  # PodCliques owned by the PCS directly: enough for the read under test
        obj = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, pclq.name, owner=owner))
        pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, pclq.name,
                                              obj["metadata"]["uid"])
        pods[pclq.name] = manifests.pod_manifest(model, plan, pclq.name, 0, owner=pod_owner)
    base = {"rc-0-a", "rc-0-g-0-w"}
    assert {p.name for p in plan.pod_cliques} == base | {"rc-0-g-1-w"}
    scaled = client.create(PODS, namespace, pods["rc-0-g-1-w"])
    node = "kwok-node-0"  # the stack's first KWOK node
    for name in sorted(base):  # scheduled: bound straight to a node, no gate
        body = pods[name]
        body["spec"].pop("schedulingGates", None)
        body["spec"]["nodeName"] = node
        if name == "rc-0-a":
            continue  # the base pod the pod GC took: missing
        client.create(PODS, namespace, body)

    activities = ReplicaActivities(client)
    ref = ReplicaRef(namespace=namespace, pcs="rc", pcs_uid=pcs_obj["metadata"]["uid"], replica=0)
    request = ReleaseRequest(ref=ref, pods={"rc-0-g-1-w-0": scaled["metadata"]["uid"]}, gang_kind="scaled",
                             gangs=("rc-0-g-0",), base_requires={"rc-0-a": 1, "rc-0-g-0-w": 1})
    result = activities.release_gates(request)
    assert result.released == () and result.skipped == ("rc-0-g-1-w-0",)
    assert "rc-0-a (0 of 1)" in result.held, result.held
    assert pod_gated(client.get(PODS, namespace, "rc-0-g-1-w-0") or {})

    client.create(PODS, namespace, pods["rc-0-a"])  # the base pod is back and bound
    result = activities.release_gates(request)
    assert result.released == ("rc-0-g-1-w-0",) and not result.held
    assert not pod_gated(client.get(PODS, namespace, "rc-0-g-1-w-0") or {})
