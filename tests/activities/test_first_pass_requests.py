"""A replica's first materialising pass makes no request it can do without (issue 17): no GET of its Service before
creating it, no LIST of native PodGroups for PodGangs it has just created (a PodGroup's name carries its PodGang's
UID). A later pass still lists them and creates none twice. Against the real apiserver; no worker runs."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from activities.backend import detect
from activities.kubeapi import PODS, Kube
from activities.replica import ReplicaActivities
from grove import names
from tests.activities.objects import CountingKube, create_pcs, one_clique_pcs
from workflows.messages import ReplicaRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack




def test_a_first_pass_skips_the_service_get_and_the_podgroup_list_and_a_later_pass_creates_nothing_twice(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    scheduling = detect(client, "auto")
    assert scheduling.default == names.BACKEND_KUBE, "the local stack serves native PodGroups"
    _, _, pcs_obj, _ = create_pcs(client, namespace, one_clique_pcs(namespace, "first", 1))
    ref = ReplicaRef(namespace=namespace, pcs="first", pcs_uid=pcs_obj["metadata"]["uid"], replica=0)
    counting = CountingKube(kube)
    activities = ReplicaActivities(counting, scheduling)

    first = activities.ensure_replica(ref)
    kinds = sorted(name.split("/")[0] for name in first.created)
    assert kinds == ["Pod", "PodClique", "PodGang", names.KIND_NATIVE_PODGROUP, "Service"], first.created
    assert counting.requests("GET", "services") == 0 and counting.requests("POST", "services") == 1
    assert counting.requests("GET", "podgroups") == 0, "no LIST of PodGroups for PodGangs created in this pass"

    client.delete(PODS, namespace, "first-0-a-0")  # gated, never bound: gone at once
    deadline = time.monotonic() + 30
    while client.get(PODS, namespace, "first-0-a-0") is not None:
        assert time.monotonic() < deadline, "the pod was not deleted"
        time.sleep(0.1)
    counting.seen.clear()
    second = activities.ensure_replica(ref)
    assert second.created == ("Pod/first-0-a-0",), second.created
    assert counting.requests("GET", "podgroups") == 1, "a PodGang from before: its PodGroup is looked up (LIST)"
    assert counting.requests("POST", "podgroups") == 0 and counting.requests("POST", "services") == 1  # a 409
