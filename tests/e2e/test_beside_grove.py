"""One controller per PodCliqueSet: objects labelled as Grove's operator labels them
(`app.kubernetes.io/managed-by: grove-operator`, ai-dynamo/grove operator/api/common/labels.go), or Grove's
finalizer on the PodCliqueSet, hold the replica: nothing of ours is created, Grove's objects are untouched, the
PodCliqueSet says why (SpecValid=False, InvalidSpec Event). The migration steps of docs/operations.md then hand it over."""

from __future__ import annotations

from temporalio.client import Client

from activities.kubeapi import PODCLIQUES, PODS
from grove import names
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, pcs_manifest, wait_for
from workflows.messages import Phase

POD_SPEC = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}


def grove_labels(pcs: str, **extra: str) -> dict[str, str]:
    """What Grove's operator puts on a PodClique of replica 0 (its labels.go keys and values)."""
    return {names.LABEL_MANAGED_BY: names.GROVE_OPERATOR_MANAGED_BY, names.LABEL_PART_OF: pcs,
            names.LABEL_PCS_REPLICA_INDEX: "0", names.LABEL_COMPONENT: "pcs-podclique", **extra}


def _spec_valid(cluster: Cluster, name: str) -> dict | None:
    conditions = ((cluster.pcs(name) or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == names.CONDITION_SPEC_VALID), None)


async def test_a_pcs_whose_objects_grove_manages_is_held_until_handed_over(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    pcs = cluster.apply(pcs_manifest("gp", cluster.namespace, cliques=[clique("a", 1, 1)]))
    # Grove's operator got there first: its PodClique, owned by the PCS, and its finalizer on the PCS.
    owner = {"apiVersion": pcs["apiVersion"], "kind": pcs["kind"], "name": "gp", "uid": pcs["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}
    grove_pclq = cluster.kube.create(PODCLIQUES, cluster.namespace, {
        "apiVersion": "grove.io/v1alpha1", "kind": "PodClique",
        "metadata": {"name": "gp-0-a", "labels": grove_labels("gp"), "ownerReferences": [owner]},
        "spec": {"roleName": "a", "replicas": 1, "podSpec": POD_SPEC}})
    cluster.patch_pcs("gp", {"metadata": {"finalizers": [names.GROVE_OPERATOR_PCS_FINALIZER]}})
    replica = Replica(temporal_client, cluster, "gp")
    status = await replica.wait_phase(Phase.INVALID, timeout=60)
    status = await replica.wait(lambda s: any("PodClique/gp-0-a" in p for p in s.problems), timeout=60)
    assert any("grove-operator" in p and names.GROVE_OPERATOR_PCS_FINALIZER in p for p in status.problems)
    condition = wait_for(lambda: (c := _spec_valid(cluster, "gp")) and c["status"] == "False" and c, timeout=30,
                         what="SpecValid=False")
    assert "managed by grove-operator" in condition["message"]
    events = [e for e in cluster.events("InvalidSpec") if e["involvedObject"]["name"] == "gp"]
    assert events and "grove-operator" in events[-1]["message"]
    assert cluster.kube.list_items(PODS, cluster.namespace) == []  # nothing of ours
    after = cluster.kube.get(PODCLIQUES, cluster.namespace, "gp-0-a")
    assert after is not None and after["metadata"]["resourceVersion"] == grove_pclq["metadata"]["resourceVersion"]

    # Migration (docs/operations.md): Grove's operator stopped, its objects of the PCS deleted, its finalizer removed.
    cluster.kube.delete(PODCLIQUES, cluster.namespace, "gp-0-a", uid=grove_pclq["metadata"]["uid"])
    wait_for(lambda: cluster.kube.get(PODCLIQUES, cluster.namespace, "gp-0-a") is None, timeout=30,
             what="Grove's PodClique gone")
    cluster.patch_pcs("gp", {"metadata": {"finalizers": None}})
    await replica.wait_phase(Phase.AVAILABLE, timeout=90)
    taken = cluster.pclq("gp-0-a")
    assert taken is not None and taken["metadata"]["labels"][names.LABEL_MANAGED_BY] == names.MANAGED_BY


async def test_groves_finalizer_on_the_pcs_holds_it(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    manifest = pcs_manifest("gf", cluster.namespace, cliques=[clique("a", 1, 1)])
    manifest["metadata"]["finalizers"] = [names.GROVE_OPERATOR_PCS_FINALIZER]
    cluster.apply(manifest)
    replica = Replica(temporal_client, cluster, "gf")
    status = await replica.wait_phase(Phase.INVALID, timeout=60)
    assert any(names.GROVE_OPERATOR_PCS_FINALIZER in p for p in status.problems), status.problems
    assert cluster.pclqs() == {}
    cluster.patch_pcs("gf", {"metadata": {"finalizers": None}})  # the migration's last step
    await replica.wait_phase(Phase.AVAILABLE, timeout=90)
