"""The leader's PodCliqueSet status writer against the real apiserver: it counts available replicas from its watch
cache as PodCliques become Ready, follows a scale-in of the PCS, ignores the Grove operator's look-alikes, writes
nothing while nothing changes, and writes nothing at all outside a leadership term. No worker runs: the objects
are created here."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from activities.kubeapi import PODCLIQUES, PODCLIQUESETS, Kube
from activities.watch_cache import WatchCache
from grove import manifests, names
from grove.plan import plan_replica
from grove.scale import podcliqueset_selector
from tests.activities.objects import create_pcs, one_clique_pcs
from worker.pcs_status import PcsStatusWriter

if TYPE_CHECKING:
    from kubernetes.client import ApiClient




def _ready(client: Kube, namespace: str, pclq: str) -> None:
    client.patch(PODCLIQUES, namespace, pclq, {"status": {"replicas": 1, "readyReplicas": 1}}, subresource="status")


def _figures(client: Kube, namespace: str) -> tuple[Any, Any, Any]:
    obj = client.get(PODCLIQUESETS, namespace, "count")
    assert obj is not None
    status = obj.get("status") or {}
    return status.get("replicas"), status.get("availableReplicas"), status.get("hpaPodSelector")


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_leader_counts_available_replicas_from_its_cache_and_writes_only_changes(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    client = Kube(kube)
    model, _, _, owner = create_pcs(client, namespace, one_clique_pcs(namespace, "count", 3))
    for replica in range(3):
        client.create(PODCLIQUES, namespace, manifests.podclique_manifest(
            model, plan_replica(model, replica), f"count-{replica}-a", owner=owner))
    # The Grove operator's PodClique in replica 0, never Ready: not ours, so it must not hold replica 0 back.
    foreign = manifests.podclique_manifest(model, plan_replica(model, 0), "count-0-a", owner=owner)
    foreign["metadata"]["name"] = "count-0-b"
    foreign["metadata"]["labels"][names.LABEL_MANAGED_BY] = names.GROVE_OPERATOR_MANAGED_BY
    client.create(PODCLIQUES, namespace, foreign)

    cache = WatchCache(client, namespace)
    writer = PcsStatusWriter(client, cache, interval=0.05)
    cache.start()
    term: asyncio.Task[None] | None = None
    try:
        await _until(lambda: cache.synced, "the cache to list every kind")
        _ready(client, namespace, "count-0-a")
        await asyncio.sleep(0.5)
        assert writer.writes == 0 and _figures(client, namespace) == (None, None, None), \
            "a standby writes nothing"

        term = asyncio.create_task(writer.run())
        await _until(lambda: _figures(client, namespace)[:2] == (3, 1), "the first count: 3 wanted, 1 available")
        assert _figures(client, namespace)[2] == podcliqueset_selector("count")

        _ready(client, namespace, "count-1-a")
        await _until(lambda: _figures(client, namespace)[:2] == (3, 2), "replica 1 counted")
        settled = writer.writes
        await asyncio.sleep(0.5)
        assert writer.writes == settled == 2, "nothing changed: nothing written"

        # Scaled in to one replica: replica 1 is no longer wanted, so no longer counted.
        client.patch(PODCLIQUESETS, namespace, "count", {"spec": {"replicas": 1}})
        await _until(lambda: _figures(client, namespace)[:2] == (1, 1), "the scale-in counted")
    finally:
        if term is not None:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)
        cache.stop()


def _set_rollout_status(client: Kube, namespace: str, updated: int, in_progress: bool) -> None:
    """What the rollout workflow writes (activities/rollout.py), by hand: no worker runs here."""
    condition = {"type": names.CONDITION_UPDATE_IN_PROGRESS, "status": "True" if in_progress else "False",
                 "reason": "Test", "message": "", "lastTransitionTime": "2026-11-27T00:00:00Z"}
    client.patch(PODCLIQUESETS, namespace, "count", {"status": {"updatedReplicas": updated, "conditions": [condition]}},
                 subresource="status")


def _not_ready(client: Kube, namespace: str, pclq: str) -> None:
    client.patch(PODCLIQUES, namespace, pclq, {"status": {"replicas": 1, "readyReplicas": 0}}, subresource="status")


async def test_a_pcs_back_to_full_availability_wakes_its_rollout_once_when_its_status_lags(
        kube: ApiClient, crds: list[str], namespace: str) -> None:
    """updatedReplicas is the rollout workflow's, which re-reads a PCS with replicas not updated only every 30 s: the
    writer wakes it when every wanted replica has become available and the status does not show them updated, once
    per return to full availability, and never during an update (the rollout follows its turns itself)."""
    client = Kube(kube)
    model, _, _, owner = create_pcs(client, namespace, one_clique_pcs(namespace, "count", 2))
    for replica in range(2):
        client.create(PODCLIQUES, namespace, manifests.podclique_manifest(
            model, plan_replica(model, replica), f"count-{replica}-a", owner=owner))
    uid = str(owner["uid"])
    woken: list[list[tuple[str, str, str]]] = []

    async def wake(pcses: list[tuple[str, str, str]]) -> None:
        woken.append(pcses)

    cache = WatchCache(client, namespace)
    writer = PcsStatusWriter(client, cache, interval=0.05, wake_rollouts=wake)
    cache.start()
    term: asyncio.Task[None] | None = None
    try:
        await _until(lambda: cache.synced, "the cache to list every kind")
        term = asyncio.create_task(writer.run())
        _ready(client, namespace, "count-0-a")
        await _until(lambda: _figures(client, namespace)[:2] == (2, 1), "one of two available")
        assert woken == [], "not every replica available: the rollout's own re-read is enough"
        _ready(client, namespace, "count-1-a")
        await _until(lambda: bool(woken), "the rollout woken when both replicas are available")
        assert woken == [[(namespace, "count", uid)]]

        async def down_and_back(pclq: str, *, updated: int, in_progress: bool) -> None:
            """The rollout workflow's status as given; one replica breaks and comes back."""
            _set_rollout_status(client, namespace, updated=updated, in_progress=in_progress)
            _not_ready(client, namespace, pclq)
            await _until(lambda: _figures(client, namespace)[:2] == (2, 1), f"{pclq} down")
            _ready(client, namespace, pclq)
            await _until(lambda: _figures(client, namespace)[:2] == (2, 2), f"{pclq} back")
            await asyncio.sleep(0.3)

        await down_and_back("count-1-a", updated=2, in_progress=False)
        assert len(woken) == 1, "the status already shows every replica updated"
        await down_and_back("count-0-a", updated=1, in_progress=True)
        assert len(woken) == 1, "an update is in progress: the rollout workflow follows its turns"
        await down_and_back("count-0-a", updated=1, in_progress=False)
        assert woken[1:] == [[(namespace, "count", uid)]], "outside an update, the status behind: woken again, once"
    finally:
        if term is not None:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)
        cache.stop()
