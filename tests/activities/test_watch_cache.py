"""The worker's watch cache against the real apiserver: a replica read from it equals a fresh read, it waits for the
versions a nudge carries (and refuses past them), and observe falls back to the apiserver where the cache must not
answer. No worker runs: the objects are created here."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest

from activities.kubeapi import PODCLIQUES, PODS, Kube, resource_version
from activities.observe import read_replica, read_replica_cached
from activities.watch_cache import NotFresh, WatchCache
from grove import manifests, names
from tests.activities.objects import create_pcs
from workflows.messages import CachedObserveRequest, ReplicaRef

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def _pcs(namespace: str) -> dict[str, Any]:
    clique = {"name": "a", "spec": {"roleName": "a", "replicas": 2, "minAvailable": 1, "podSpec": {
        "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10"}]}}}
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": "wc", "namespace": namespace},
            "spec": {"replicas": 1, "template": {"cliques": [clique]}}}


def _until(predicate: Any, what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _replica_with_clique(client: Kube, namespace: str) -> tuple[Any, Any, ReplicaRef, dict[str, Any]]:
    """PodCliqueSet `wc` and its replica 0's PodClique `wc-0-a`: (model, plan, the replica's ref, the PodClique)."""
    model, plan, pcs_obj, owner = create_pcs(client, namespace, _pcs(namespace))
    ref = ReplicaRef(namespace=namespace, pcs="wc", pcs_uid=pcs_obj["metadata"]["uid"], replica=0)
    pclq = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, "wc-0-a", owner=owner))
    return model, plan, ref, pclq


def test_a_replica_read_from_the_watch_cache_is_the_fresh_read_and_waits_for_nudged_versions(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.replica import ReplicaActivities

    client = Kube(kube)
    model, plan, ref, pclq = _replica_with_clique(client, namespace)
    pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, "wc-0-a",
                                          pclq["metadata"]["uid"])
    client.create(PODS, namespace, manifests.pod_manifest(model, plan, "wc-0-a", 0, owner=pod_owner))

    cache = WatchCache(client, namespace).start()
    try:
        _until(lambda: cache.synced, "the cache to list every kind")
        cached, fresh = read_replica_cached(cache, ref), read_replica(client, ref)
        for kind in ("pclqs", "pods", "gangs", "pcsgs"):
            assert ({n: o["metadata"]["resourceVersion"] for n, o in (getattr(cached, kind) or {}).items()}
                    == {n: o["metadata"]["resourceVersion"] for n, o in (getattr(fresh, kind) or {}).items()}), kind
        assert set(cached.pods) == {"wc-0-a-0"} and cached.foreign == fresh.foreign == []
        assert "managedFields" not in cached.pods["wc-0-a-0"]["metadata"], "the cache keeps no managedFields"

        # A nudge for a pod created now: the cache is asked for its version, and waits for it.
        made = client.create(PODS, namespace, manifests.pod_manifest(model, plan, "wc-0-a", 1, owner=pod_owner))
        version = resource_version(made)
        assert version is not None
        view = read_replica_cached(cache, ref, {"Pod": version})
        assert "wc-0-a-1" in view.pods and view.versions["Pod"] >= version

        # Past anything the cache can have seen: refused after the wait, never answered stale.
        began = time.monotonic()
        with pytest.raises(NotFresh, match="behind Pod"):
            cache.replica(namespace, "wc", 0, at_least={"Pod": version + 10**9}, wait_seconds=0.3)
        assert time.monotonic() - began < 2

        # The activity: from the cache when it can; from the apiserver for a PodCliqueSet the cache has not got.
        activities = ReplicaActivities(client, cache=cache)
        assert activities.observe_replica_cached(CachedObserveRequest(ref=ref)).from_cache
        other = ref.model_copy(update={"pcs": "not-yet-heard-of"})
        snapshot = activities.observe_replica_cached(CachedObserveRequest(ref=other))
        assert not snapshot.from_cache and snapshot.pcs_state.value == "Absent"

        # Objects of another controller are reported, as by the fresh read (the one-controller rule).
        foreign = manifests.pod_manifest(model, plan, "wc-0-a", 0, owner=pod_owner)
        foreign["metadata"]["name"] = "wc-0-a-7"
        foreign["metadata"]["labels"][names.LABEL_MANAGED_BY] = names.GROVE_OPERATOR_MANAGED_BY
        foreign_version = resource_version(client.create(PODS, namespace, foreign))
        assert foreign_version is not None
        view = read_replica_cached(cache, ref, {"Pod": foreign_version})
        assert ("Pod", "wc-0-a-7") in view.foreign and "wc-0-a-7" not in view.pods
        assert view.foreign == read_replica(client, ref).foreign
        client.delete(PODS, namespace, "wc-0-a-7")
        _until(lambda: not read_replica_cached(cache, ref).foreign, "the cache to hear of the deletion")

        # Materialising on the cache creates; a deletion it calls for is taken on a fresh read instead.
        ensured = activities.ensure_replica_cached(CachedObserveRequest(ref=ref))
        assert ensured.created and not ensured.deleted and not ensured.deferred
        assert ensured.snapshot.from_cache
        surplus = manifests.pod_manifest(model, plan, "wc-0-a", 0, owner=pod_owner)
        surplus["metadata"]["name"] = "wc-0-a-5"
        surplus_version = resource_version(client.create(PODS, namespace, surplus))
        assert surplus_version is not None
        ensured = activities.ensure_replica_cached(CachedObserveRequest(ref=ref, at_least={"Pod": surplus_version}))
        assert ensured.deferred == ("Pod/wc-0-a-5",) and ensured.deleted == ("Pod/wc-0-a-5",)
        assert not ensured.snapshot.from_cache, "the deletion was decided on the fresh read"
    finally:
        cache.stop()


def test_a_kind_nothing_changed_in_reaches_the_version_a_later_cache_listed_it_at_and_no_further_than_it_holds(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    """Two workers' caches. The second lists after more writes, so a kind nothing changed in since (PodGangs: there
    are none) stands at a higher version there, with the same objects. A read on the first asked to reach it (the
    floor a replica carries from a read on the second) is served after one LIST shows nothing of that kind missing,
    not refused after the whole wait. Where that LIST shows an object the first has not heard of (its PodClique
    watch stopped here), the read is refused."""
    client = Kube(kube)
    model, plan, ref, pclq = _replica_with_clique(client, namespace)
    first, second = WatchCache(client, namespace).start(), WatchCache(client, namespace)
    try:
        _until(lambda: first.synced, "the first cache to list every kind")
        pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, "wc-0-a",
                                              pclq["metadata"]["uid"])
        client.create(PODS, namespace, manifests.pod_manifest(model, plan, "wc-0-a", 0, owner=pod_owner))
        second.start()
        _until(lambda: second.synced, "the second cache to list every kind")
        floor = {"PodGang": second.versions()["PodGang"]}
        assert floor["PodGang"] > first.versions()["PodGang"], "an idle kind: the later list is ahead"

        view = read_replica_cached(first, ref, floor)
        assert view.versions["PodGang"] >= floor["PodGang"] and set(view.pods) == {"wc-0-a-0"}

        first._stores["PodClique"].watch.stop()  # type: ignore[union-attr]
        other = manifests.podclique_manifest(model, plan, "wc-0-a", owner=pclq["metadata"]["ownerReferences"][0])
        other["metadata"]["name"] = "wc-0-b"
        made = resource_version(client.create(PODCLIQUES, namespace, other))
        assert made is not None
        _until(lambda: (second.versions().get("PodClique") or 0) >= made, "the second cache to hear of it")
        listed: list[str] = []
        list_ = client.list

        def listing(resource: Any, *args: Any, **kwargs: Any) -> Any:
            listed.append(resource.kind)
            return list_(resource, *args, **kwargs)

        client.list = listing  # type: ignore[method-assign]
        with pytest.raises(NotFresh, match="behind PodClique"):
            first.replica(namespace, "wc", 0, at_least={"PodClique": made}, wait_seconds=1.0)
        client.list = list_  # type: ignore[method-assign]
        assert listed == ["PodClique"], "refused after the probe's LIST found what the store lacks"
    finally:
        first.stop()
        second.stop()


class CountingKube(Kube):
    """The real client, counting its GETs and PATCHes (what the status mirror costs)."""

    def __init__(self, inner: Kube) -> None:
        super().__init__(inner.api_client)
        self.calls: list[str] = []

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("get")
        return super().get(*args, **kwargs)

    def patch(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("patch")
        return super().patch(*args, **kwargs)


def test_the_status_mirror_writes_from_the_watch_cache_with_one_request_and_keeps_transition_times(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.status import mirror
    from workflows.messages import ConditionMirror, MirrorRequest, ObjectStatusMirror

    client = Kube(kube)
    _, _, ref, pclq = _replica_with_clique(client, namespace)
    uid = pclq["metadata"]["uid"]

    def request(ready: int) -> MirrorRequest:
        condition = ConditionMirror(type="MinAvailableBreached", status="False", reason="Enough", message="ok")
        return MirrorRequest(ref=ref, objects=(ObjectStatusMirror(kind=names.KIND_PODCLIQUE, name="wc-0-a", uid=uid,
                                                                  fields={"readyReplicas": ready},
                                                                  conditions=(condition,)),))

    cache = WatchCache(client, namespace).start()
    try:
        _until(lambda: cache.synced and cache.get(PODCLIQUES.kind, namespace, "wc-0-a") is not None,
               "the cache to hold the PodClique")
        counting = CountingKube(client)
        assert mirror(counting, request(1), cache) == ["wc-0-a"]
        assert counting.calls == ["patch"], "a cached object is patched without a GET first"
        written = client.get(PODCLIQUES, namespace, "wc-0-a")
        assert written is not None and written["status"]["readyReplicas"] == 1
        since = next(c for c in written["status"]["conditions"]
                     if c["type"] == "MinAvailableBreached")["lastTransitionTime"]
        _until(lambda: (cache.get(PODCLIQUES.kind, namespace, "wc-0-a") or {}).get("metadata", {})
               .get("resourceVersion") == written["metadata"]["resourceVersion"], "the cache to see the write")
        time.sleep(1.1)  # transition times have one-second resolution: a rewritten one would differ
        counting.calls.clear()
        assert mirror(counting, request(2), cache) == ["wc-0-a"] and counting.calls == ["patch"]
        again = client.get(PODCLIQUES, namespace, "wc-0-a")
        assert again is not None and again["status"]["readyReplicas"] == 2
        assert next(c for c in again["status"]["conditions"]
                    if c["type"] == "MinAvailableBreached")["lastTransitionTime"] == since, \
            "the condition's status did not change, so neither does its lastTransitionTime"

        counting.calls.clear()
        assert mirror(counting, request(2), None) == [] and counting.calls == ["get"], \
            "without a cache: a GET, and nothing written when nothing changed"
        stale = ObjectStatusMirror(kind=names.KIND_PODCLIQUE, name="wc-0-a", uid="another-uid", fields={})
        counting.calls.clear()
        assert mirror(counting, MirrorRequest(ref=ref, objects=(stale,)), cache) == []
        assert counting.calls == ["get"], "a cached copy at another UID is not trusted: read, and left alone"
    finally:
        cache.stop()


def test_the_status_mirror_sends_only_the_fields_it_sets_never_another_writer_s_from_an_older_copy(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    """A status field this mirror does not set, written by someone else after the cache's copy was taken, is left as
    written: the patch carries the mirror's own fields, not the whole status as the older copy had it."""
    from activities.status import mirror
    from workflows.messages import ConditionMirror, MirrorRequest, ObjectStatusMirror

    client = Kube(kube)
    _, _, ref, pclq = _replica_with_clique(client, namespace)
    client.patch(PODCLIQUES, namespace, "wc-0-a", {"status": {"readyReplicas": 1, "replicas": 1}},
                 subresource="status")
    cache = WatchCache(client, namespace).start()
    try:
        _until(lambda: ((cache.get(PODCLIQUES.kind, namespace, "wc-0-a") if cache.synced else None) or {})
               .get("status", {}).get("readyReplicas") == 1, "the cache to hold the PodClique's counts")
    finally:
        cache.stop()  # the cached copy stays at readyReplicas 1
    client.patch(PODCLIQUES, namespace, "wc-0-a", {"status": {"readyReplicas": 3, "replicas": 3}},
                 subresource="status")
    condition = ConditionMirror(type="PodCliqueScheduled", status="True", reason="Enough", message="ok")
    item = ObjectStatusMirror(kind=names.KIND_PODCLIQUE, name="wc-0-a", uid=pclq["metadata"]["uid"],
                              fields={"scheduledReplicas": 3}, conditions=(condition,))
    assert mirror(client, MirrorRequest(ref=ref, objects=(item,)), cache) == ["wc-0-a"]
    written = client.get(PODCLIQUES, namespace, "wc-0-a")
    assert written is not None
    status = written["status"]
    assert (status["readyReplicas"], status["replicas"], status["scheduledReplicas"]) == (3, 3, 3), status
    assert [c["type"] for c in status["conditions"]] == ["PodCliqueScheduled"]


def test_a_write_of_this_process_is_read_back_until_the_watch_delivers_it_or_something_newer() -> None:
    """WatchCache.wrote: the answer to our own write replaces the older version the store holds (a round reads the
    gates its previous round removed as removed), an older watch event never puts the old one back, a newer one
    does replace it, and an object the store does not hold (deleted since) is never brought back. The store alone:
    no watch runs, so what the store holds is what these calls made it hold."""
    cache = WatchCache(Kube.__new__(Kube), "ns")
    store = cache._stores[PODS.kind]

    def pod(rv: int, uid: str = "u1", gated: bool = True) -> dict[str, Any]:
        gates = [{"name": names.SCHEDULING_GATE}] if gated else []
        return {"metadata": {"namespace": "ns", "name": "p", "uid": uid, "resourceVersion": str(rv)},
                "spec": {"schedulingGates": gates}}

    def held() -> tuple[str, bool]:
        obj = store.objects[("ns", "p")]
        return obj["metadata"]["resourceVersion"], bool(obj["spec"]["schedulingGates"])

    store.put(pod(5))
    cache.wrote(PODS, pod(7, gated=False))
    assert held() == ("7", False), "our write, before the watch delivers it"
    store.put(pod(6))  # the watch catching up with an event from before the write
    assert held() == ("7", False)
    cache.wrote(PODS, pod(6))
    assert held() == ("7", False), "an older answer is not kept"
    store.put(pod(8, gated=False))
    assert held() == ("8", False), "the watch's newer event"
    store.put(pod(3, uid="u2"))
    assert held() == ("3", True), "another pod of that name: the watch decides"
    store.drop(("ns", "p"))
    cache.wrote(PODS, pod(9, uid="u2", gated=False))
    assert ("ns", "p") not in store.objects, "deleted meanwhile: not brought back"


def test_gate_and_startup_releases_are_read_back_from_the_cache_before_the_watch_delivers_them(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    """The activities hand the cache kube-apiserver's answer to their patches: with the cache's watches stopped (so
    nothing else could bring the change in), a read from it shows the gate gone and the pod marked started."""
    from activities.replica import ReplicaActivities
    from activities.scaling import StartupActivities
    from workflows.messages import StartupRequest

    client = Kube(kube)
    model, plan, ref, pclq = _replica_with_clique(client, namespace)
    owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, "wc-0-a", pclq["metadata"]["uid"])
    pod = manifests.pod_manifest(model, plan, "wc-0-a", 0, owner=owner)
    pod["metadata"].setdefault("annotations", {})[names.ANNOTATION_STARTUP] = names.STARTUP_WAITING
    made = client.create(PODS, namespace, pod)
    assert any(g["name"] == names.SCHEDULING_GATE for g in made["spec"].get("schedulingGates") or [])
    cache = WatchCache(client, namespace).start()
    try:
        _until(lambda: "wc-0-a-0" in read_replica_cached(cache, ref).pods, "the cache to hold the pod")
    finally:
        cache.stop()  # from here on only the activities' writes reach the store

    uid = made["metadata"]["uid"]
    released, _ = ReplicaActivities(client, cache=cache)._remove_gates(ref, {"wc-0-a-0": uid}, "base", ("wc-0",))
    assert released == ["wc-0-a-0"]
    started = StartupActivities(client, cache).release_startup(StartupRequest(ref=ref, pods={"wc-0-a-0": uid}))
    assert started.started == ("wc-0-a-0",)
    cached = read_replica_cached(cache, ref).pods["wc-0-a-0"]
    assert not any(g["name"] == names.SCHEDULING_GATE for g in cached["spec"].get("schedulingGates") or [])
    assert cached["metadata"]["annotations"][names.ANNOTATION_STARTUP] == names.STARTUP_RELEASED
