"""The leader's PodClique count writer against the real stack: kube-scheduler binds the pods whose gate is removed
here and KWOK makes them Ready, and the writer's counts follow, from its watch cache. It writes nothing outside a
leadership term, nothing while nothing changes, and writes the counts again over an older count another writer (a
workflow round that read before the pods moved) left. No worker runs: the objects are created here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from activities.kubeapi import PODCLIQUES, PODS, Kube
from activities.observe import POD_COUNT_FIELDS, pod_counts
from activities.watch_cache import WatchCache
from grove import manifests, names
from tests.activities.objects import create_pcs
from worker.clique_counts import CliqueCountWriter

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def _pcs(namespace: str) -> dict[str, Any]:
    """One replica, one PodClique `a` of three pause pods, minAvailable 2."""
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": "cc", "namespace": namespace},
            "spec": {"replicas": 1, "template": {"cliques": [{"name": "a", "spec": {
                "roleName": "a", "replicas": 3, "minAvailable": 2, "podSpec": {
                    "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10"}]}}}]}}}


def _counts(client: Kube, namespace: str) -> tuple[Any, ...]:
    obj = client.get(PODCLIQUES, namespace, "cc-0-a")
    assert obj is not None
    status = obj.get("status") or {}
    return tuple(status.get(field) for field in POD_COUNT_FIELDS)


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_leader_writes_podclique_counts_as_pods_are_bound_and_ready_and_corrects_an_older_write(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    model, plan, _, owner = create_pcs(client, namespace, _pcs(namespace))
    pclq = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, "cc-0-a", owner=owner))
    pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, "cc-0-a",
                                          pclq["metadata"]["uid"])
    pods = [client.create(PODS, namespace, manifests.pod_manifest(model, plan, "cc-0-a", i, owner=pod_owner))
            for i in range(3)]
    names_ = [p["metadata"]["name"] for p in pods]

    cache = WatchCache(client, namespace)
    writer = CliqueCountWriter(client, cache, interval=0.05)
    cache.start()
    term: asyncio.Task[None] | None = None
    try:
        await _until(lambda: cache.synced, "the cache to list every kind")
        await asyncio.sleep(0.3)
        assert writer.writes == 0 and _counts(client, namespace) == (None,) * 4, "a standby writes nothing"

        term = asyncio.create_task(writer.run())
        await _until(lambda: _counts(client, namespace) == (3, 0, 0, 3), "the first count: three pods, all gated")

        for name in names_[:2]:  # released: kube-scheduler binds them, KWOK makes them Ready
            client.patch(PODS, namespace, name, {"spec": {"schedulingGates": []}})
        await _until(lambda: _counts(client, namespace) == (3, 2, 2, 1), "two pods bound and Ready, one gated")
        live = [client.get(PODS, namespace, name) for name in names_]
        assert pod_counts(pclq, [p for p in live if p is not None]) == dict(zip(POD_COUNT_FIELDS, (3, 2, 2, 1),
                                                                                 strict=True))
        settled = writer.writes
        await asyncio.sleep(0.5)
        assert writer.writes == settled, "nothing changed: nothing written"

        # A round that read before the pods moved writes its older counts: the leader hears it and writes again.
        client.patch(PODCLIQUES, namespace, "cc-0-a", {"status": {"readyReplicas": 0, "scheduledReplicas": 0}},
                     subresource="status")
        await _until(lambda: _counts(client, namespace) == (3, 2, 2, 1), "the older counts written over")
        assert writer.writes == settled + 1

        client.delete(PODS, namespace, names_[2])  # the gated pod: no node, so gone at once
        await _until(lambda: _counts(client, namespace) == (2, 2, 2, 0), "the deleted pod no longer counted")
    finally:
        if term is not None:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)
        cache.stop()
