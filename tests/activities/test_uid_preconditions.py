"""A gate release or a startup release meant for a pod that has since been replaced under the same name skips it,
and leaves the new pod alone. kube-apiserver refuses such a patch (metadata.uid as a precondition) with 422, "field
is immutable", not 409: taken for an invalid request, it failed the whole activity for good and held the replica's
round back 30 s (found in fault run seed 12, 2026-11-26). Against the real apiserver."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from activities.kubeapi import PODS, Kube
from activities.replica import ReplicaActivities
from activities.scaling import StartupActivities
from grove import names
from workflows.messages import ReleaseRequest, ReplicaRef, StartupRequest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack


def _replace(client: Kube, namespace: str, name: str) -> tuple[str, str]:
    """Create the pod, delete it, create it again: (old UID, new UID)."""
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                            "spec": {"schedulingGates": [{"name": names.SCHEDULING_GATE}],
                                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}
    old = client.create(PODS, namespace, body)["metadata"]["uid"]
    client.delete(PODS, namespace, name)
    deadline = time.monotonic() + 30
    while client.get(PODS, namespace, name) is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    return old, client.create(PODS, namespace, body)["metadata"]["uid"]


def _gated(client: Kube, namespace: str, name: str) -> bool:
    pod = client.get(PODS, namespace, name)
    assert pod is not None
    return any(g.get("name") == names.SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


def test_releases_meant_for_a_replaced_pod_skip_it_and_leave_the_new_one_alone(
        stack: LocalStack, kube: ApiClient, namespace: str) -> None:
    client = Kube(kube)
    ref = ReplicaRef(namespace=namespace, pcs="p", pcs_uid="pcs-uid", replica=0)
    old, new = _replace(client, namespace, "p-0-a-0")

    stale = ReplicaActivities(client).release_gates(ReleaseRequest(ref=ref, pods={"p-0-a-0": old}, gang_kind="base"))
    assert stale.released == () and stale.skipped == ("p-0-a-0",)
    assert _gated(client, namespace, "p-0-a-0"), "the new pod keeps its gate"

    started = StartupActivities(client).release_startup(StartupRequest(ref=ref, pods={"p-0-a-0": old}))
    assert started.started == ()
    pod = client.get(PODS, namespace, "p-0-a-0")
    assert pod is not None and names.ANNOTATION_STARTUP not in (pod["metadata"].get("annotations") or {})

    fresh = ReplicaActivities(client).release_gates(ReleaseRequest(ref=ref, pods={"p-0-a-0": new}, gang_kind="base"))
    assert fresh.released == ("p-0-a-0",) and not _gated(client, namespace, "p-0-a-0")
