"""Our own witness of the cluster: list+watch of the namespace's pods and PodCliques from threads, every change
kept in order with the wall-clock moment it arrived.

The checks need two things the product cannot be asked about: the order of pod changes within one watch stream (a
scaled pod's gate must go only after the base gang was scheduled: the pod stream orders both), and when each
PodClique incarnation (UID) was marked for deletion (its `metadata.deletionTimestamp`, and when we saw it). After a
broken stream (kube-apiserver stopped) the feed relists and marks what changed meanwhile as `relist` events.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from activities.kubeapi import JSON, PODCLIQUES, PODS, Kube, ListWatch, Resource, pod_gated
from grove import names


def _condition(obj: JSON, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def _controller(obj: JSON) -> tuple[str, str]:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("uid"))
    return "", ""


@dataclass(frozen=True)
class PodState:
    """The few fields of a pod the checks need."""

    name: str
    uid: str
    labels: dict[str, str]
    owner_kind: str
    owner_uid: str
    node: str
    gated: bool
    scheduled: bool
    ready: bool
    deleting: bool

    @staticmethod
    def of(obj: JSON) -> PodState:
        meta, spec = obj.get("metadata", {}), obj.get("spec") or {}
        kind, uid = _controller(obj)
        return PodState(
            name=meta.get("name", ""), uid=meta.get("uid", ""), labels=dict(meta.get("labels") or {}),
            owner_kind=kind, owner_uid=uid, node=spec.get("nodeName") or "",
            gated=pod_gated(obj),
            scheduled=bool(spec.get("nodeName")) or _condition(obj, "PodScheduled"),
            ready=_condition(obj, "Ready"), deleting=bool(meta.get("deletionTimestamp")),
        )

    @property
    def ours(self) -> bool:
        """Created by the product: our label and a PodClique as controller (look-alikes have neither owner)."""
        return self.labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY and self.owner_kind == names.KIND_PODCLIQUE


@dataclass(frozen=True)
class PodEvent:
    seq: int
    at: float  # time.time() on arrival
    type: str  # ADDED | MODIFIED | DELETED
    pod: PodState
    relist: bool = False


@dataclass
class PclqRecord:
    """One PodClique incarnation as we saw it."""

    uid: str
    name: str
    labels: dict[str, str]
    owner_kind: str
    owner_uid: str
    created: datetime | None
    first_seen: float
    deletion_timestamp: datetime | None = None  # metadata.deletionTimestamp (whole seconds)
    deleting_seen: float | None = None  # when we first saw it
    deleting_seen_relist: bool = False  # seen only after a relist: the arrival time is an upper bound
    gone_seen: float | None = None

    @property
    def ours(self) -> bool:
        return self.labels.get(names.LABEL_MANAGED_BY) == names.MANAGED_BY


def parse_time(value: Any) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


@dataclass
class Recorder:
    """Follows pods and PodCliques of one namespace until stopped."""

    kube_factory: Callable[[], Kube]
    namespace: str
    pod_events: list[PodEvent] = field(default_factory=list)
    pclqs: dict[str, PclqRecord] = field(default_factory=dict)
    _seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _watches: list[ListWatch] = field(default_factory=list)

    def start(self) -> Recorder:
        for resource in (PODS, PODCLIQUES):
            watch = ListWatch(self.kube_factory(), resource, self.namespace,
                              functools.partial(self._note, resource), watch_timeout_seconds=30, backoff=(0.3, 0.3))
            self._watches.append(watch.start(name=f"faults-watch-{resource.plural}"))
        return self

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()
        for watch in self._watches:
            watch.stop(join_seconds=10)

    @property
    def relists(self) -> int:
        return sum(watch.relists for watch in self._watches)

    def snapshot(self) -> tuple[list[PodEvent], dict[str, PclqRecord]]:
        with self._lock:
            return list(self.pod_events), {k: PclqRecord(**vars(v)) for k, v in self.pclqs.items()}

    def _note(self, resource: Resource, kind: str, obj: JSON, relist: bool) -> None:
        now = time.time()
        meta = obj.get("metadata", {})
        with self._lock:
            if resource is PODS:
                self._seq += 1
                self.pod_events.append(PodEvent(self._seq, now, kind, PodState.of(obj), relist))
                return
            uid = meta["uid"]
            record = self.pclqs.get(uid)
            if record is None:
                owner_kind, owner_uid = _controller(obj)
                record = PclqRecord(uid=uid, name=meta.get("name", ""), labels=dict(meta.get("labels") or {}),
                                    owner_kind=owner_kind, owner_uid=owner_uid,
                                    created=parse_time(meta.get("creationTimestamp")), first_seen=now)
                self.pclqs[uid] = record
            if meta.get("deletionTimestamp") and record.deleting_seen is None:
                record.deletion_timestamp = parse_time(meta["deletionTimestamp"])
                record.deleting_seen = now
                record.deleting_seen_relist = relist
            if kind == "DELETED" and record.gone_seen is None:
                record.gone_seen = now
