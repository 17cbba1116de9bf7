"""PodClique pod counts between the replica workflow's rounds, kept by the watcher's leader from its watch cache.

A PodClique's `replicas`, `readyReplicas`, `scheduledReplicas` and `scheduleGatedReplicas` move with every pod
bound or Ready. The replica workflow writes them in its rounds, with everything it decides on (conditions,
`updatedReplicas`, `currentPodTemplateHash`, the PCSG's figures). For them alone, every such change was nudged to
the workflow within the status window and cost a read-only round: five history events, 1.06 rounds per 17-pod
replica at 1,000 replicas, the tail that kept that shape above 25 events per replica (docs/benchmarks.md). Here the
leader counts each changed replica's PodCliques at most once per `interval` and patches the counts that differ from
the ones the object shows, so the status window can be long (worker/config.py) and counts still follow the pods
within about a second.

Two writers of one field: a round writes the counts as its read had them, which may be older than what the leader
wrote just before. The leader hears that write (a PodClique event), counts again and writes the newer counts back;
nothing else writes them, so they settle on the pods' state. Not a decision: nothing in the product reads them
back, except the PodCliqueSet's availableReplicas, which the same leader counts from them (worker/pcs_status.py).
Each write names the PodClique's UID, so a count never lands on another incarnation of the name. Without a watcher
(`--no-watcher`) only the rounds write them, as before.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading

from activities.fanout import fan_out
from activities.kubeapi import JSON, PODCLIQUES, PODS, Kube, KubeError, Resource, ours, terminating, uid_of
from activities.observe import pod_counts
from activities.watch_cache import NotFresh, ReplicaIndex, WatchCache, replica_index

log = logging.getLogger(__name__)

RETRY_SECONDS = 5.0  # after a failed write: the apiserver may be down; counts are not urgent
# How long the pod changes of a replica gather before its PodCliques are counted: a gang is bound and its pods turn
# Ready in bursts, and each count that differs is a PATCH per PodClique. The same second the PCS's figures wait.
INTERVAL_SECONDS = 1.0


class CliqueCountWriter:
    """Hears the watch cache (leader or not: the set of replicas to recount is kept either way) and, while `run`
    runs, writes the pod counts of the PodCliques of the replicas that changed."""

    def __init__(self, kube: Kube, cache: WatchCache, *, interval: float = INTERVAL_SECONDS) -> None:
        self.kube = kube
        self.cache = cache
        self.interval = interval
        self._lock = threading.Lock()
        self._dirty: set[ReplicaIndex] = set()
        self.writes = 0  # PATCHes sent (tests, metrics)
        cache.subscribe(self._heard)

    def _heard(self, resource: Resource, _kind: str, obj: JSON, _relisted: bool, _listed_at: str | None) -> None:
        if resource.kind not in (PODS.kind, PODCLIQUES.kind) or not ours(obj):
            return
        index = replica_index(obj)
        if index is not None:
            with self._lock:
                self._dirty.add(index)

    async def run(self) -> None:
        """One leadership term: recount every replica once (another writer, or none, may have left any count
        behind), then whatever changes, until cancelled."""
        with self._lock:
            self._dirty.update(await asyncio.to_thread(self._all_replicas))
        while True:
            await asyncio.sleep(self.interval)
            with self._lock:
                batch, self._dirty = self._dirty, set()
            if batch:
                failed = await asyncio.to_thread(self.flush, sorted(batch))
                if failed:
                    with self._lock:
                        self._dirty.update(failed)
                    await asyncio.sleep(RETRY_SECONDS)

    def _all_replicas(self) -> list[ReplicaIndex]:
        try:
            return self.cache.replica_indexes(PODCLIQUES)
        except NotFresh:
            return []

    def flush(self, batch: list[ReplicaIndex]) -> list[ReplicaIndex]:
        """Write the counts of these replicas' PodCliques where they differ; returns the replicas to try again."""
        if not self.cache.synced:
            return batch
        outcomes = fan_out([functools.partial(self._write, index) for index in batch], bulk=True)
        return [index for index, ok in zip(batch, outcomes, strict=True) if ok is False]

    def _write(self, index: ReplicaIndex) -> bool:
        namespace, pcs, replica = index
        if not replica.isdigit():
            return True
        try:
            _, items, _, _ = self.cache.replica(namespace, pcs, int(replica), wait_seconds=0.0)
        except NotFresh:
            return False
        pods = items[PODS.kind]
        ok = True
        for pclq in items[PODCLIQUES.kind]:
            if not ours(pclq) or terminating(pclq):
                continue
            counts = pod_counts(pclq, pods)
            status = pclq.get("status") or {}
            if all(status.get(field) == value for field, value in counts.items()):
                continue
            uid = uid_of(pclq)
            try:
                written = self.kube.patch(PODCLIQUES, namespace, pclq["metadata"]["name"],
                                          {"metadata": {"uid": uid}, "status": counts}, subresource="status")
            except KubeError as exc:
                if exc.not_found or exc.replaced:
                    continue  # gone, or another PodClique by that name: its own events bring its count
                log.warning("PodClique %s/%s: pod counts not written (%s); trying again", namespace,
                            pclq["metadata"]["name"], exc)
                ok = False
                continue
            self.writes += 1
            self.cache.wrote(PODCLIQUES, written)  # the next count of this replica compares with what was written
        return ok

