"""The watcher against the real apiserver and Temporal: it keeps following changes across the leadership cycle the
elector puts it through (run, cancelled when the lease is lost, run again when it is regained)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from activities.kubeapi import PODCLIQUESETS, Kube
from grove import names
from worker.watcher import Watcher

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from temporalio.client import Client


def _pcs(name: str) -> dict[str, object]:
    clique = {"name": "c", "spec": {"roleName": "c", "replicas": 1, "minAvailable": 1,
                                    "podSpec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET, "metadata": {"name": name},
            "spec": {"replicas": 0, "template": {"cliques": [clique]}}}


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_watcher_follows_changes_again_after_losing_and_regaining_the_lease(
        kube: ApiClient, crds: list[str], namespace: str, temporal_client: Client) -> None:
    client = Kube(kube)
    watcher = Watcher(client, temporal_client, namespace=namespace)

    async def lead_once(pcs: str) -> None:
        """One leadership term: run, see a new PodCliqueSet, lose the lease (the elector cancels the run)."""
        term = asyncio.create_task(watcher.run())
        try:
            await _until(lambda: watcher.pcs_feed.synced.is_set(), "the PodCliqueSet feed to sync")
            client.create(PODCLIQUESETS, namespace, _pcs(pcs))
            await _until(lambda: (namespace, pcs) in watcher.pcs_feed.known, f"the watcher to see {pcs}")
        finally:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)

    await lead_once("first-term")
    await lead_once("second-term")  # before the fix its threads ended at once: nothing was watched any more
