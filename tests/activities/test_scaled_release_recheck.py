"""release_gates for a scaled gang reads the base gang again before it removes a gate: a snapshot that said
"scheduled" can be seconds old (fault run seed 12 round 11: the pod GC force-deleted a lost node's base pods between
the snapshot and the release). Against the real apiserver: the objects are created here, no worker runs."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from activities.kubeapi import EVENTS, PODCLIQUES, PODS, Kube, pod_gated
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


def test_base_pods_of_the_same_release_go_after_the_scaled_ones_and_even_when_those_are_held(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    """One release_gates for a round's scaled gangs and base pods (the base PodClique's pods past minAvailable):
    a base pod never waits on the recheck of its own gang, and where both go the scaled gates are removed first."""
    from activities.replica import ReplicaActivities

    client = Kube(kube)
    manifest = _pcs(namespace)
    manifest["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 3  # rc-0-a-1 and -2: past minAvailable 1
    model, plan, pcs_obj, owner = create_pcs(client, namespace, manifest)
    uids: dict[str, str] = {}
    bound: dict[str, dict[str, Any]] = {}
    for pclq in plan.pod_cliques:
        obj = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, pclq.name, owner=owner))
        pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, pclq.name,
                                              obj["metadata"]["uid"])
        for index, pod in enumerate(pclq.pod_names):
            body = manifests.pod_manifest(model, plan, pclq.name, index, owner=pod_owner)
            if pod in ("rc-0-a-0", "rc-0-g-0-w-0"):  # the base gang's minimum, scheduled
                body["spec"].pop("schedulingGates", None)
                body["spec"]["nodeName"] = "kwok-node-0"
                bound[pod] = body
                if pod == "rc-0-a-0":
                    continue  # taken by the pod GC: missing at first
            uids[pod] = client.create(PODS, namespace, body)["metadata"]["uid"]

    activities = ReplicaActivities(client)
    ref = ReplicaRef(namespace=namespace, pcs="rc", pcs_uid=pcs_obj["metadata"]["uid"], replica=0)

    def request(base_pod: str) -> ReleaseRequest:
        return ReleaseRequest(ref=ref, pods={"rc-0-g-1-w-0": uids["rc-0-g-1-w-0"]}, gang_kind="scaled",
                              gangs=("rc-0-g-0",), base_requires={"rc-0-a": 1, "rc-0-g-0-w": 1},
                              base={base_pod: uids[base_pod]}, base_gang="rc-0")

    result = activities.release_gates(request("rc-0-a-1"))
    assert result.released == ("rc-0-a-1",) and result.skipped == ("rc-0-g-1-w-0",) and result.held
    assert result.released_uids == {"rc-0-a-1": uids["rc-0-a-1"]}
    assert pod_gated(client.get(PODS, namespace, "rc-0-g-1-w-0") or {})
    assert not pod_gated(client.get(PODS, namespace, "rc-0-a-1") or {})

    client.create(PODS, namespace, bound["rc-0-a-0"])  # the base pod is back and bound
    patched: list[str] = []
    patch = client.patch

    def recording(resource: Any, ns: str, name: str, body: Any, **kwargs: Any) -> Any:
        if resource is PODS:
            patched.append(name)
        return patch(resource, ns, name, body, **kwargs)

    read: list[str] = []
    get, list_ = client.get, client.list

    def reading_one(resource: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(f"get {resource.kind}")
        return get(resource, *args, **kwargs)

    def reading_all(resource: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(f"list {resource.kind}")
        return list_(resource, *args, **kwargs)

    client.patch, client.get, client.list = recording, reading_one, reading_all  # type: ignore[method-assign]
    result = activities.release_gates(request("rc-0-a-2"))
    client.get, client.list = get, list_  # type: ignore[method-assign]
    assert result.released == ("rc-0-g-1-w-0", "rc-0-a-2") and not result.held
    assert patched == ["rc-0-g-1-w-0", "rc-0-a-2"], "the scaled gate removed first"
    assert not any(pod_gated(client.get(PODS, namespace, pod) or {}) for pod in patched)
    # The recheck is one round trip: the replica's PodCliques and pods, nothing else.
    assert sorted(read) == ["list Pod", "list PodClique"], read
    # One Event per release: the combined one names the scaled pod and the base pod (two would also collide on the
    # name an activity gives its Event, and the second be lost).
    released_events = [e["message"] for e in client.list_items(EVENTS, namespace)
                       if e.get("reason") == "GatesReleased"]
    assert len(released_events) == 2, released_events  # the first call's base pod, then both of the second
    assert any("rc-0-g-1-w-0" in m and "rc-0-a-2" in m for m in released_events), released_events
