"""A round's read writes the status the round will mirror where the workflow asks (mirror-with-read): the same
objects, fields and digests as the workflow's own evaluation of that read, nothing where the digests sent say it is
written already, and nothing where the round will not evaluate that read (something to materialise). Materialising
does the same on the snapshot it leaves (mirror-with-ensure). Against the real apiserver; no worker runs."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from activities.backend import detect
from activities.kubeapi import PODCLIQUES, PODS, Kube
from activities.replica import ReplicaActivities
from grove import names
from grove.evaluate import ReplicaMemory, evaluate_replica
from tests.activities.objects import CountingKube, create_pcs, one_clique_pcs
from workflows import presentation
from workflows.messages import CachedObserveRequest, EnsureRequest, MirrorWithRead, ReplicaRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _patches(counting: CountingKube) -> list[str]:
    """PodClique and PodCliqueSet status writes, by path."""
    return [path.rsplit("/namespaces/", 1)[-1] for method, path in counting.seen
            if method == "PATCH" and path.endswith("/status")]


def _one_clique_replica(kube: ApiClient, namespace: str,
                        name: str) -> tuple[Kube, ReplicaRef, CountingKube, ReplicaActivities]:
    """A one-clique PodCliqueSet of one replica; the activities on a client that counts requests."""
    client = Kube(kube)
    _, _, pcs_obj, _ = create_pcs(client, namespace, one_clique_pcs(namespace, name, 1))
    ref = ReplicaRef(namespace=namespace, pcs=name, pcs_uid=pcs_obj["metadata"]["uid"], replica=0)
    counting = CountingKube(kube)
    return client, ref, counting, ReplicaActivities(counting, detect(client, "auto"))


def _delete_pod(client: Kube, namespace: str, pod: str) -> None:
    client.delete(PODS, namespace, pod)
    deadline = time.monotonic() + 30
    while client.get(PODS, namespace, pod) is not None:
        assert time.monotonic() < deadline, "the pod was not deleted"
        time.sleep(0.1)


def test_a_read_writes_the_rounds_status_once_and_not_where_the_round_materialises_first(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client, ref, counting, activities = _one_clique_replica(kube, namespace, "rm")
    activities.ensure_replica(ref)
    plan = MirrorWithRead(memory=ReplicaMemory(), decided_at=datetime.now(UTC), due_by=EPOCH)

    counting.seen.clear()
    found = activities.observe_replica_cached(CachedObserveRequest(ref=ref, mirror=plan))
    assert not found.drift and found.mirrored is not None
    # What the workflow computes on the recorded read: the same objects and digests.
    assert found.topology is not None
    evaluation = evaluate_replica(found.topology, presentation.observation(found), plan.memory,
                                  max(plan.decided_at, found.read_at), plan.due_by)
    expected = {m.name: presentation.digest(m) for m in presentation.status_mirrors(found.topology, found, evaluation)}
    assert found.mirrored.digests == expected == {"rm-0-a": expected["rm-0-a"]}
    assert found.mirrored.replica_available is evaluation.replica_available is False
    assert _patches(counting) == [f"{namespace}/podcliques/rm-0-a/status", f"{namespace}/podcliquesets/rm/status"], \
        "the PodClique, then the PodCliqueSet recounted (its availability was never mirrored)"
    status = client.get(PODCLIQUES, namespace, "rm-0-a")["status"]
    assert status["replicas"] == 1 and status["scheduleGatedReplicas"] == 1 and status["readyReplicas"] == 0
    breached = [c for c in status["conditions"] if c["type"] == names.CONDITION_MIN_AVAILABLE_BREACHED]
    assert [(c["status"], c["reason"]) for c in breached] == [("False", "NeverAvailable")]

    # Sent what it wrote: nothing left to write, no request.
    counting.seen.clear()
    again = activities.observe_replica_cached(CachedObserveRequest(ref=ref, mirror=plan.model_copy(update={
        "mirrored": found.mirrored.digests, "replica_available": False})))
    assert again.mirrored is not None and again.mirrored.digests == {}
    assert _patches(counting) == []

    # A pod missing: the round materialises first and evaluates what that returns, so the read writes nothing.
    _delete_pod(client, namespace, "rm-0-a-0")
    counting.seen.clear()
    drifted = activities.observe_replica_cached(CachedObserveRequest(ref=ref, mirror=plan))
    assert drifted.drift and drifted.mirrored is None
    assert _patches(counting) == []

    # Without the workflow asking, a read writes nothing (runs begun before mirror-with-read).
    activities.ensure_replica(ref)
    counting.seen.clear()
    plain = activities.observe_replica_cached(CachedObserveRequest(ref=ref))
    assert plain.mirrored is None and _patches(counting) == []


def test_materialising_writes_the_status_of_what_it_made_where_asked(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client, ref, counting, activities = _one_clique_replica(kube, namespace, "me")
    plan = MirrorWithRead(memory=ReplicaMemory(), decided_at=datetime.now(UTC), due_by=EPOCH)

    result = activities.ensure_replica_releasing(EnsureRequest(ref=ref, cached=False, release_base=True, mirror=plan))
    found = result.snapshot
    assert result.created and result.released_base and not found.drift
    assert found.topology is not None and found.mirrored is not None
    # What the workflow computes on the snapshot materialising returned (its base gang released): the same digests.
    evaluation = evaluate_replica(found.topology, presentation.observation(found), plan.memory,
                                  max(plan.decided_at, found.read_at), plan.due_by)
    expected = {m.name: presentation.digest(m) for m in presentation.status_mirrors(found.topology, found, evaluation)}
    assert found.mirrored.digests == expected == {"me-0-a": expected["me-0-a"]}
    assert f"{namespace}/podcliques/me-0-a/status" in _patches(counting)
    status = client.get(PODCLIQUES, namespace, "me-0-a")["status"]
    assert status["replicas"] == 1 and status["scheduleGatedReplicas"] == 0, "written after the gate was removed"

    # Without the workflow asking, materialising writes no status (runs begun before mirror-with-ensure).
    _delete_pod(client, namespace, "me-0-a-0")
    counting.seen.clear()
    plain = activities.ensure_replica_releasing(EnsureRequest(ref=ref, cached=False, release_base=True))
    assert plain.created and plain.snapshot.mirrored is None and _patches(counting) == []
