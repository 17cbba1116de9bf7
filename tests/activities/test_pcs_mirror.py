"""The PodCliqueSet's availableReplicas, written by every replica workflow of the PCS after mirroring its own
PodCliques, ends right when two replicas race: the one whose reads missed the other's PodClique write reads again
after its own write and corrects it. Against the real apiserver: the objects are created here, no worker runs."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from activities import status as status_mirror
from activities.kubeapi import PODCLIQUES, PODCLIQUESETS, SCALINGGROUPS, Kube, Resource
from grove import manifests
from grove.plan import plan_replica
from tests.activities.objects import create_pcs, one_clique_pcs

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack




def _ready(client: Kube, namespace: str, pclq: str) -> None:
    client.patch(PODCLIQUES, namespace, pclq, {"status": {"replicas": 1, "readyReplicas": 1}}, subresource="status")


class _ReadsBeforeTheOtherReplica(Kube):
    """Replica 0's first PodClique LIST is answered, then replica 1 writes its PodClique Ready and mirrors the PCS
    (both replicas available): replica 0 goes on with a list that misses that write."""

    def __init__(self, api: ApiClient, other: Kube, namespace: str, uid: str) -> None:
        super().__init__(api)
        self.other, self.namespace, self.uid, self.raced = other, namespace, uid, False

    def list_items(self, resource: Resource, namespace: str | None = None, **kwargs: Any) -> list[Any]:
        items = super().list_items(resource, namespace, **kwargs)
        if resource is PODCLIQUES and not self.raced:
            self.raced = True
            _ready(self.other, self.namespace, "race-1-a")
            assert status_mirror.mirror_pcs(self.other, self.namespace, "race", self.uid)
            assert _available(self.other, self.namespace) == 2
        return items


def _available(client: Kube, namespace: str) -> int | None:
    obj = client.get(PODCLIQUESETS, namespace, "race")
    assert obj is not None
    found: int | None = (obj.get("status") or {}).get("availableReplicas")
    return found


def test_a_replica_that_read_before_the_others_write_corrects_its_own_stale_count(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    model, _, pcs_obj, owner = create_pcs(client, namespace, one_clique_pcs(namespace, "race", 2))
    uid = pcs_obj["metadata"]["uid"]
    for replica in (0, 1):
        plan = plan_replica(model, replica)
        client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, f"race-{replica}-a",
                                                                          owner=owner))
    _ready(client, namespace, "race-0-a")  # replica 0's own write; it mirrors the PCS next

    racing = _ReadsBeforeTheOtherReplica(kube, client, namespace, uid)
    assert status_mirror.mirror_pcs(racing, namespace, "race", uid)

    assert racing.raced
    assert _available(client, namespace) == 2, "replica 0's stale count (1) must not be the last word"


class _Counting(Kube):
    def __init__(self, api: ApiClient) -> None:
        super().__init__(api)
        self.lists: list[str] = []
        self.writes: list[Any] = []

    def patch(self, resource: Resource, namespace: str | None, name: str, body: Any, **kwargs: Any) -> Any:
        self.writes.append(body)
        return super().patch(resource, namespace, name, body, **kwargs)

    def list_items(self, resource: Resource, namespace: str | None = None, **kwargs: Any) -> list[Any]:
        self.lists.append(resource.plural)
        return super().list_items(resource, namespace, **kwargs)


def test_a_recount_told_there_are_no_scaling_groups_lists_none_unless_the_fresh_pcs_has_some(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    model, plan, pcs_obj, owner = create_pcs(client, namespace, one_clique_pcs(namespace, "race", 2))
    client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, "race-0-a", owner=owner))
    _ready(client, namespace, "race-0-a")
    counting = _Counting(kube)
    assert status_mirror.mirror_pcs(counting, namespace, "race", pcs_obj["metadata"]["uid"], expect_groups=False)
    assert "podcliquescalinggroups" not in counting.lists and _available(client, namespace) == 1

    # A PCS with a scaling group whose replica is not available, recounted on a stale "no groups" guess: the fresh
    # PCS has groups, so they are read, and the replica is not counted available.
    grouped = one_clique_pcs(namespace, "race", 2)
    grouped["metadata"]["name"] = "grouped"
    grouped["spec"]["template"]["cliques"].append(copy.deepcopy(grouped["spec"]["template"]["cliques"][0]))
    grouped["spec"]["template"]["cliques"][1]["name"] = "b"
    grouped["spec"]["template"]["podCliqueScalingGroups"] = [{"name": "g", "cliqueNames": ["b"], "replicas": 1}]
    model, plan, obj, owner = create_pcs(client, namespace, grouped)
    client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, "grouped-0-a", owner=owner))
    _ready(client, namespace, "grouped-0-a")
    client.create(SCALINGGROUPS, namespace, manifests.scaling_group_manifest(plan, "grouped-0-g", owner=owner))
    counting.lists.clear()
    counting.writes.clear()
    status_mirror.mirror_pcs(counting, namespace, "grouped", obj["metadata"]["uid"], expect_groups=False)
    assert "podcliquescalinggroups" in counting.lists
    # Read before the first write: no passing wrong count (the confirming LIST would only correct it afterwards).
    assert [w["status"]["availableReplicas"] for w in counting.writes] == [0]
    found = client.get(PODCLIQUESETS, namespace, "grouped")
    assert found is not None and found["status"]["availableReplicas"] == 0, "its PCSG replica is not available"
