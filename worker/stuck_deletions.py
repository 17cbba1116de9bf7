"""PodCliques of ours left in foreground deletion after their pods are gone: finished by the watcher's leader.

A gang termination deletes each PodClique with `propagationPolicy: Foreground` (activities/replica.py), so it goes only
after its pods and the recreated one never meets them. kube-controller-manager's garbage collector then removes the
`foregroundDeletion` finalizer. After etcd and kube-apiserver faults it may never do so: in fault run seed 14 on 8c0f54f
(docs/fault-runs.md) a PodClique kept the finalizer for 12 minutes with no object naming it as owner, and its replica
waited for a deletion that never came. Deleting it again with `propagationPolicy: Background` makes kube-apiserver drop
that finalizer; the watcher's DELETED event then nudges the replica, which recreates it.

The leader hears the watch cache for such PodCliques and, once one has been in foreground deletion for `stuck_after`,
decides on a fresh read only: a GET of the PodClique (same UID, still in foreground deletion with that finalizer alone)
and a LIST of its pods (none owned by it). The DELETE carries the UID as a precondition. Each one is logged.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime, timedelta

from activities.kubeapi import JSON, PODCLIQUES, PODS, Kube, KubeError, Resource, ours
from activities.metrics import FOREGROUND_DELETIONS_FINISHED
from activities.watch_cache import WatchCache
from grove import names

log = logging.getLogger(__name__)

FOREGROUND = "foregroundDeletion"
STUCK_AFTER = timedelta(seconds=60)  # the collector finishes within seconds when it works (pods go first)
SWEEP_SECONDS = 15.0

Key = tuple[str, str, str]  # (namespace, name, uid)


def in_foreground_deletion(pclq: JSON) -> datetime | None:
    """When this PodClique of ours began a foreground deletion that only the collector's finalizer holds, else None."""
    meta = pclq.get("metadata") or {}
    since = meta.get("deletionTimestamp")
    if not ours(pclq) or not since or meta.get("finalizers") != [FOREGROUND]:
        return None
    return datetime.fromisoformat(str(since))  # RFC 3339 with "Z": read as UTC since Python 3.11


def owned_by(pod: JSON, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (pod.get("metadata") or {}).get("ownerReferences") or [])


class StuckDeletionSweeper:
    """Hears the watch cache (leader or not); while `run` runs, finishes the deletions that have been stuck too long."""

    def __init__(self, kube: Kube, cache: WatchCache, *, stuck_after: timedelta = STUCK_AFTER,
                 interval: float = SWEEP_SECONDS) -> None:
        self.kube = kube
        self.stuck_after = stuck_after
        self.interval = interval
        self._lock = threading.Lock()
        self._pending: dict[Key, datetime] = {}
        self.finished: list[str] = []  # namespace/name of each PodClique deleted again (tests)
        cache.subscribe(self._heard)

    def _heard(self, resource: Resource, kind: str, obj: JSON, _relisted: bool, _listed_at: str | None) -> None:
        if resource.kind != PODCLIQUES.kind:
            return
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""), str(meta.get("uid") or ""))
        since = None if kind == "DELETED" else in_foreground_deletion(obj)
        with self._lock:
            if since is None:
                self._pending.pop(key, None)
            else:
                self._pending[key] = since

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await asyncio.to_thread(self.sweep)

    def sweep(self, now: datetime | None = None) -> None:
        now = now or datetime.now(UTC)
        with self._lock:
            due = [key for key, since in self._pending.items() if now - since >= self.stuck_after]
        for key in due:
            try:
                self._finish(*key)
            except KubeError as exc:  # kube-apiserver unreachable: the next sweep tries again
                log.warning("PodClique %s/%s: could not check its foreground deletion (%s)", key[0], key[1], exc)

    def _finish(self, namespace: str, name: str, uid: str) -> None:
        fresh = self.kube.get(PODCLIQUES, namespace, name)
        if fresh is None or (fresh.get("metadata") or {}).get("uid") != uid or in_foreground_deletion(fresh) is None:
            with self._lock:
                self._pending.pop((namespace, name, uid), None)
            return
        pods = self.kube.list_items(PODS, namespace, label_selector=f"{names.LABEL_PODCLIQUE}={name}")
        left = [p for p in pods if owned_by(p, uid)]
        if left:
            return  # the collector is still at work (or stuck on a pod): nothing to finish yet
        if self.kube.delete(PODCLIQUES, namespace, name, uid=uid, propagation="Background"):
            since = (fresh.get("metadata") or {}).get("deletionTimestamp")
            log.warning("PodClique %s/%s (uid %s) had been in foreground deletion since %s with its pods gone: the "
                        "garbage collector had not finished it; deleted again with Background propagation",
                        namespace, name, uid, since)
            FOREGROUND_DELETIONS_FINISHED.inc()
            self.finished.append(f"{namespace}/{name}")
        with self._lock:
            self._pending.pop((namespace, name, uid), None)
