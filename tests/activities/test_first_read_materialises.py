"""A new replica's first round reads by materialising (FIRST_READ_MATERIALISES_RULE in workflows/replica.py): one
ensure_replica_releasing call marked `first_read` is both the round's read and its materialising. Where the round
would materialise it makes the replica, releases its base gang and writes the round's status; where the round would
not (its PodCliqueSet gone, its spec held, this replica not wanted) it changes nothing and returns the read, where the
same call without the mark refuses the held spec. Against the real apiserver; no worker runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from temporalio.exceptions import ApplicationError

from activities.backend import detect
from activities.kubeapi import PODCLIQUES, PODCLIQUESETS, PODS, Kube
from activities.replica import INVALID_SPEC, ReplicaActivities
from grove import names
from grove.evaluate import ReplicaMemory
from tests.activities.objects import CountingKube, create_pcs, one_clique_pcs
from workflows.messages import EnsureRequest, MirrorWithRead, PcsState, ReplicaRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _writes(counting: CountingKube) -> list[str]:
    return [f"{method} {path.rsplit('/namespaces/', 1)[-1]}" for method, path in counting.seen if method != "GET"]


def _replica(kube: ApiClient, namespace: str, body: dict, replica: int = 0) -> tuple[Kube, ReplicaRef, CountingKube,
                                                                                      ReplicaActivities]:
    client = Kube(kube)
    _, _, created, _ = create_pcs(client, namespace, body)
    ref = ReplicaRef(namespace=namespace, pcs=body["metadata"]["name"], pcs_uid=created["metadata"]["uid"],
                     replica=replica)
    counting = CountingKube(kube)
    return client, ref, counting, ReplicaActivities(counting, detect(client, "auto"))


def _first_read(ref: ReplicaRef, *, first_read: bool = True) -> EnsureRequest:
    plan = MirrorWithRead(memory=ReplicaMemory(), decided_at=datetime.now(UTC), due_by=EPOCH)
    return EnsureRequest(ref=ref, cached=True, release_base=True, mirror=plan, first_read=first_read)


def test_a_new_replicas_first_read_makes_it_releases_its_base_gang_and_writes_its_status(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client, ref, counting, activities = _replica(kube, namespace, one_clique_pcs(namespace, "fr", 1))
    result = activities.ensure_replica_releasing(_first_read(ref))
    found = result.snapshot
    assert "PodClique/fr-0-a" in result.created and "Pod/fr-0-a-0" in result.created, result.created
    assert set(result.released_base) == {"fr-0-a-0"}, "the base gang released in the same call"
    assert found.valid and not found.drift and found.mirrored is not None
    pod = client.get(PODS, namespace, "fr-0-a-0")
    assert names.SCHEDULING_GATE not in [g["name"] for g in pod["spec"].get("schedulingGates") or []]
    status = client.get(PODCLIQUES, namespace, "fr-0-a")["status"]
    assert status["replicas"] == 1 and status["scheduleGatedReplicas"] == 0, "the round's status, after the release"


def test_a_first_read_of_a_replica_no_longer_wanted_changes_nothing(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client, ref, counting, activities = _replica(kube, namespace, one_clique_pcs(namespace, "fw", 1), replica=1)
    result = activities.ensure_replica_releasing(_first_read(ref))
    assert result.snapshot.pcs_state is PcsState.PRESENT and result.snapshot.wanted_replicas == 1
    assert not result.created and not result.released_base
    assert _writes(counting) == [], "the round scales it in on a fresh read; the read made nothing"
    assert client.get(PODCLIQUES, namespace, "fw-1-a") is None


def test_a_first_read_of_a_held_spec_returns_it_for_the_round_and_the_plain_call_refuses_it(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    body = one_clique_pcs(namespace, "fh", 1)
    body["metadata"]["finalizers"] = [names.GROVE_OPERATOR_PCS_FINALIZER]  # the Grove operator drives it
    client, ref, counting, activities = _replica(kube, namespace, body)
    result = activities.ensure_replica_releasing(_first_read(ref))
    assert result.snapshot.problems and not result.snapshot.valid, "held: the round holds the replica on this read"
    assert not result.created and _writes(counting) == []
    with pytest.raises(ApplicationError) as refused:
        activities.ensure_replica_releasing(_first_read(ref, first_read=False))
    assert refused.value.type == INVALID_SPEC
    assert client.get(PODCLIQUES, namespace, "fh-0-a") is None
    client.patch(PODCLIQUESETS, namespace, "fh", {"metadata": {"finalizers": None}})


def test_a_first_read_of_a_deleted_podcliqueset_says_so_and_changes_nothing(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client, ref, counting, activities = _replica(kube, namespace, one_clique_pcs(namespace, "fg", 1))
    client.delete(PODCLIQUESETS, namespace, "fg")
    result = activities.ensure_replica_releasing(_first_read(ref))
    assert result.snapshot.pcs_state is not PcsState.PRESENT
    assert not result.created and _writes(counting) == []
