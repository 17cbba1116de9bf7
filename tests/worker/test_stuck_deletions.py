"""The leader finishes a PodClique deletion the garbage collector left stuck, against the real apiserver.

kube-controller-manager is stopped for the test, as a collector whose informers went stale would be: a PodClique
deleted with Foreground propagation keeps its `foregroundDeletion` finalizer. While a pod it owns is left the sweeper
does nothing; once the pod is gone it deletes the PodClique again with Background propagation, and it goes."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from activities.kubeapi import PODCLIQUES, PODS, Kube
from activities.watch_cache import WatchCache
from grove import manifests, names
from grove.plan import plan_replica
from tests.activities.objects import create_pcs, one_clique_pcs
from worker.stuck_deletions import FOREGROUND, StuckDeletionSweeper, in_foreground_deletion

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack




def test_in_foreground_deletion_is_ours_with_the_collectors_finalizer_alone() -> None:
    ours = {"metadata": {"labels": {names.LABEL_MANAGED_BY: names.MANAGED_BY}, "finalizers": [FOREGROUND],
                         "deletionTimestamp": "2026-11-26T19:07:09Z"}}
    assert in_foreground_deletion(ours) == datetime(2026, 11, 26, 19, 7, 9, tzinfo=UTC)
    for changed in ({"finalizers": [FOREGROUND, "example.com/hold"]}, {"deletionTimestamp": None},
                    {"labels": {names.LABEL_MANAGED_BY: names.GROVE_OPERATOR_MANAGED_BY}}):
        assert in_foreground_deletion({"metadata": {**ours["metadata"], **changed}}) is None, changed


async def test_a_podclique_left_in_foreground_deletion_is_deleted_again_once_its_pods_are_gone(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    model, _, _, owner = create_pcs(client, namespace, one_clique_pcs(namespace, "stuck", 1))
    pclq = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(
        model, plan_replica(model, 0), "stuck-0-a", owner=owner))
    uid = pclq["metadata"]["uid"]
    pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, "PodClique", "stuck-0-a", uid)
    client.create(PODS, namespace, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stuck-0-a-0", "labels": {names.LABEL_PODCLIQUE: "stuck-0-a"},
                     "ownerReferences": [pod_owner]},
        "spec": {"schedulingGates": [{"name": names.SCHEDULING_GATE}],  # never bound: deleted at once
                 "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10"}]},
    })
    cache = WatchCache(client, namespace)
    sweeper = StuckDeletionSweeper(client, cache, stuck_after=timedelta(seconds=1), interval=0.2)
    cache.start()
    stack.stop_component("kube-controller-manager")
    term = asyncio.create_task(sweeper.run())
    try:
        assert client.delete(PODCLIQUES, namespace, "stuck-0-a", uid=uid, propagation="Foreground")
        held = client.get(PODCLIQUES, namespace, "stuck-0-a")
        assert held is not None and in_foreground_deletion(held) is not None, "no collector: the finalizer stays"
        await asyncio.sleep(2.5)  # past stuck_after, several sweeps
        assert client.get(PODCLIQUES, namespace, "stuck-0-a") is not None, "deleted again while its pod was left"
        assert sweeper.finished == []

        client.delete(PODS, namespace, "stuck-0-a-0")  # what the collector would have done
        deadline = time.monotonic() + 15
        while client.get(PODCLIQUES, namespace, "stuck-0-a") is not None:
            assert time.monotonic() < deadline, "the stuck PodClique was never finished"
            await asyncio.sleep(0.1)
        assert sweeper.finished == [f"{namespace}/stuck-0-a"]
    finally:
        term.cancel()
        await asyncio.gather(term, return_exceptions=True)
        cache.stop()
        stack.start_component("kube-controller-manager")
