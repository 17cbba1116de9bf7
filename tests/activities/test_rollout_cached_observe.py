"""An idle rollout round read from the watch cache gives the rollout workflow what a read of the apiserver gives it,
with no request; a PodCliqueSet the cache does not hold as the rollout's own is read from the apiserver. Against the
real apiserver (no worker runs); and which PCS status lets a full pass leave its rollout workflow asleep."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from activities.backend import detect
from activities.kubeapi import Kube
from activities.reconcile import rollout_settled
from activities.replica import ReplicaActivities
from activities.rollout import RolloutActivities
from activities.watch_cache import WatchCache
from grove.rollout import generation_hash
from grove.validation import parse_pcs
from tests.activities.objects import CountingKube, create_pcs, one_clique_pcs
from workflows.messages import ReplicaRef
from workflows.rollout_messages import PcsRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def test_an_idle_rollout_read_from_the_cache_equals_the_fresh_read_and_costs_no_request(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    _, _, pcs_obj, _ = create_pcs(client, namespace, one_clique_pcs(namespace, "idle", 2))
    uid = pcs_obj["metadata"]["uid"]
    replicas = ReplicaActivities(client, detect(client, "auto"))
    for index in range(2):
        replicas.ensure_replica(ReplicaRef(namespace=namespace, pcs="idle", pcs_uid=uid, replica=index))
    ref = PcsRef(namespace=namespace, pcs="idle", pcs_uid=uid)
    fresh = RolloutActivities(client).observe_rollout(ref)
    assert fresh.valid and fresh.wanted_replicas == 2 and fresh.total_pod_cliques == 2

    counting = CountingKube(kube)
    cache = WatchCache(client, namespace).start()
    try:
        cached_reader = RolloutActivities(counting, cache)
        deadline = time.monotonic() + 15
        while (cached := cached_reader.observe_rollout_cached(ref)) != fresh or counting.seen:
            assert time.monotonic() < deadline, f"the cached read never matched: {cached} / {counting.seen}"
            counting.seen.clear()
            time.sleep(0.1)
        assert counting.seen == [], "an idle round the cache answers makes no request"

        # Not this PCS (another UID): the apiserver answers, and says the rollout's PCS was replaced.
        other = cached_reader.observe_rollout_cached(ref.model_copy(update={"pcs_uid": "not-the-uid"}))
        assert counting.seen and other.pcs_state == fresh_state_of(client, ref, "not-the-uid")
        # Without a cache (a worker started with --no-watch-cache): the apiserver, the same answer.
        counting.seen.clear()
        assert RolloutActivities(counting).observe_rollout_cached(ref) == fresh and counting.seen
    finally:
        cache.stop()


def fresh_state_of(client: Kube, ref: PcsRef, uid: str) -> str:
    return RolloutActivities(client).observe_rollout(ref.model_copy(update={"pcs_uid": uid})).pcs_state


def settled(obj: dict[str, Any]) -> bool:
    return rollout_settled(obj, parse_pcs(obj)[0])


def test_a_full_pass_leaves_asleep_only_a_rollout_whose_status_shows_the_spec_done() -> None:
    body = one_clique_pcs("ns", "p", 3)
    model, problems = parse_pcs(body)
    assert model is not None and not problems
    done = {"currentGenerationHash": generation_hash(model), "updatedReplicas": 3,
            "conditions": [{"type": "UpdateInProgress", "status": "False", "reason": "UpdateComplete"}]}
    assert settled({**body, "status": done})
    assert not settled(body), "no status written yet"
    assert not settled({**body, "status": {**done, "currentGenerationHash": "older"}}), "a missed change"
    assert not settled({**body, "status": {**done, "updatedReplicas": 2}}), "a replica not updated"
    assert not settled({**body, "spec": {**body["spec"], "replicas": 4}, "status": done}), "scaled out"
    running = {**done, "conditions": [{"type": "UpdateInProgress", "status": "True", "reason": "Updating"}]}
    assert not settled({**body, "status": running}), "an update in progress"
    assert not settled({**body, "spec": {}, "status": done}), "an invalid spec"
