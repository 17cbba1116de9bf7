"""The PodCliqueSet's status figures, kept by one writer per scope: the watcher's leader.

Until now every replica workflow recounted its PCS after its own availability changed (activities/status.mirror_pcs):
a GET, a LIST of the PCS's PodCliques, a PATCH and a confirming LIST, because writers racing on one PCS had to
correct each other. That was 7 of B3's 18 requests per replica, and it grew with the replicas of a PCS (issue 17).
Here the leader counts from its watch cache whenever a PodClique, PCSG or the PCS changes, each PCS at most once per
`interval`, and patches only figures that differ from the ones it last wrote. With one writer there is no race to
correct: a count made while the cache lagged is redone when the event that was missing arrives.

Not a decision: `replicas`, `availableReplicas` and `hpaPodSelector` are for `kubectl get` and the HPA's selector,
and nothing in the product reads them back (DESIGN §4.8). DESIGN §4.8 has activities write all status; this is the
one departure, for the reason above. Without a watcher (`--no-watcher`) the activities recount as before.

`updatedReplicas` is the PCS's rollout workflow's to write (workflows/rollout.py), and outside a turn it re-reads
the PCS only every 30 s while a replica is not updated: a new PCS showed UP-TO-DATE 0 for up to 30 s after every
replica was Ready. So when a count finds every wanted replica available and the status does not show them all
updated (no update in progress), the writer wakes that workflow once: one signal per PCS per return to full
availability, not one per replica.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from activities.fanout import fan_out
from activities.kubeapi import (
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    SCALINGGROUPS,
    Kube,
    KubeError,
    Resource,
    condition_true,
    ours,
)
from activities.watch_cache import NotFresh, WatchCache
from grove import names, ownership
from grove.pcs_count import pcs_figures
from workflows.contract import PCS_CHANGED_SIGNAL, rollout_workflow_id

log = logging.getLogger(__name__)

PcsKey = tuple[str, str]  # (namespace, name)
PcsId = tuple[str, str, str]  # (namespace, name, uid)
WakeRollouts = Callable[[list[PcsId]], Awaitable[None]]
RETRY_SECONDS = 5.0  # after a failed write: the apiserver may be down; its figures are not urgent
WAKE_CONCURRENCY = 32


class PcsStatusWriter:
    """Hears the watch cache (leader or not: the set of PCSes to recount is kept either way) and, while `run`
    runs, writes the figures of the PCSes that changed."""

    def __init__(self, kube: Kube, cache: WatchCache, *, interval: float = 1.0,
                 wake_rollouts: WakeRollouts | None = None) -> None:
        self.kube = kube
        self.cache = cache
        self.interval = interval
        self.wake_rollouts = wake_rollouts
        self._lock = threading.Lock()
        self._dirty: set[PcsKey] = set()
        self._written: dict[PcsId, dict[str, Any]] = {}  # figures this term wrote
        self._fully_available: dict[PcsId, bool] = {}  # what this term's last count found
        self._to_wake: set[PcsId] = set()
        self.writes = 0  # PATCHes sent (tests, metrics)
        cache.subscribe(self._heard)

    def _heard(self, resource: Resource, _kind: str, obj: JSON, _relisted: bool, _listed_at: str | None) -> None:
        meta = obj.get("metadata") or {}
        if resource.kind == PODCLIQUESETS.kind:
            key = (meta.get("namespace") or "", meta.get("name") or "")
        elif resource.kind in (PODCLIQUES.kind, SCALINGGROUPS.kind) and ours(obj):
            owner = (meta.get("labels") or {}).get(names.LABEL_PART_OF)
            if not owner:
                return
            key = (meta.get("namespace") or "", str(owner))
        else:
            return
        with self._lock:
            self._dirty.add(key)

    async def run(self) -> None:
        """One leadership term: recount every PCS once (another writer may have left any figure behind), then
        whatever changes, until cancelled."""
        self._written.clear()
        self._fully_available.clear()
        with self._lock:
            self._dirty.update(await asyncio.to_thread(self._all_keys))
        while True:
            await asyncio.sleep(self.interval)
            with self._lock:
                batch, self._dirty = self._dirty, set()
            if batch:
                failed = await asyncio.to_thread(self.flush, sorted(batch))
                await self._wake()
                if failed:
                    with self._lock:
                        self._dirty.update(failed)
                    await asyncio.sleep(RETRY_SECONDS)

    async def _wake(self) -> None:
        with self._lock:
            wake, self._to_wake = sorted(self._to_wake), set()
        if wake and self.wake_rollouts is not None:
            await self.wake_rollouts(wake)

    def _all_keys(self) -> list[PcsKey]:
        try:
            return self.cache.podcliqueset_keys()
        except NotFresh:
            return []

    def flush(self, batch: list[PcsKey]) -> list[PcsKey]:
        """Write the figures of these PCSes where they changed; returns the ones to try again."""
        if not self.cache.synced:
            return batch
        outcomes = fan_out([functools.partial(self._write, key) for key in batch], bulk=True)
        return [key for key, ok in zip(batch, outcomes, strict=True) if not ok]

    def _write(self, key: PcsKey) -> bool:
        try:
            pcs, pclqs, groups = self.cache.podcliqueset(*key)
        except NotFresh:
            return False
        if pcs is None or (pcs.get("metadata") or {}).get("deletionTimestamp"):
            self._forget(key)
            return True
        uid = str(pcs["metadata"]["uid"])
        figures = pcs_figures(pcs, [p for p in pclqs if _counted(p, uid)], [g for g in groups if _counted(g, uid)])
        if figures is None:  # invalid spec: the last figures stand
            return True
        self._note_availability((*key, uid), pcs, figures)
        written = self._written.get((*key, uid))
        status = pcs.get("status") or {}
        if written == figures or (written is None and all(status.get(k) == v for k, v in figures.items())):
            self._written[(*key, uid)] = figures
            return True
        try:
            self.kube.patch(PODCLIQUESETS, key[0], key[1], {"metadata": {"uid": uid}, "status": figures},
                            subresource="status")
        except KubeError as exc:
            if exc.not_found or exc.replaced:
                return True  # gone, or another PCS by that name: its own events bring its count
            log.warning("PodCliqueSet %s/%s: status figures not written (%s); trying again", *key, exc)
            return False
        self.writes += 1
        self._written[(*key, uid)] = figures
        return True

    def _forget(self, key: PcsKey) -> None:
        """A PCS gone or going: drop what this term remembers of it (a term lasts as long as the worker leads)."""
        for memory in (self._written, self._fully_available):
            for pcs_id in list(memory):  # one C call: other keys' threads may add entries meanwhile
                if pcs_id[:2] == key:
                    memory.pop(pcs_id, None)

    def _note_availability(self, pcs_id: PcsId, pcs: JSON, figures: dict[str, Any]) -> None:
        """Wake the rollout workflow when every wanted replica has just become available (or is at a term's first
        count) and the status does not show them all updated, unless an update is in progress: the rollout
        workflow follows its own turns."""
        full = figures["availableReplicas"] == figures["replicas"]
        was_full = self._fully_available.get(pcs_id, False)
        self._fully_available[pcs_id] = full
        if not full or was_full:
            return
        updated = (pcs.get("status") or {}).get("updatedReplicas")
        if updated != figures["replicas"] and not condition_true(pcs, names.CONDITION_UPDATE_IN_PROGRESS):
            with self._lock:
                self._to_wake.add(pcs_id)


def rollout_waker(client: Client) -> WakeRollouts:
    """Signals each PCS's rollout workflow that its PCS changed (it reads it again at once). A workflow that is not
    running is left alone: the reconciler starts one for every PCS."""
    limit = asyncio.Semaphore(WAKE_CONCURRENCY)

    async def wake_one(namespace: str, name: str, uid: str) -> None:
        async with limit:
            try:
                await client.get_workflow_handle(rollout_workflow_id(namespace, name, uid)).signal(PCS_CHANGED_SIGNAL)
            except RPCError as exc:
                if exc.status != RPCStatusCode.NOT_FOUND:
                    log.warning("PodCliqueSet %s/%s: rollout workflow not woken (%s)", namespace, name, exc)

    async def wake(pcses: list[PcsId]) -> None:
        await asyncio.gather(*(wake_one(*pcs_id) for pcs_id in pcses))
        log.debug("woke the rollout workflows of %d PodCliqueSets, fully available", len(pcses))

    return wake


def _counted(obj: JSON, pcs_uid: str) -> bool:
    """Ours (the cache also holds the Grove operator's) and controlled by this PCS, not by an earlier one of the same
    name whose objects are still going. A PCSG's PodCliques (controlled by the PCSG) never count: its own
    availableReplicas speaks for them."""
    return ours(obj) and ownership.controlled_by(obj, (pcs_uid,))
