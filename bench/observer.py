"""One watcher for every benchmark: pods and PodCliques, their state changes stamped on arrival.

Kubernetes timestamps have whole-second resolution, too coarse for sub-second latencies, so the benchmark's own
watch stamps each change with the wall clock when it arrives. Product runs and floor runs are observed by this
same watcher in the same process, so its own delay is in both and cancels out of their comparison. Where a server
timestamp exists (deletionTimestamp) it is kept beside the arrival time as a cross-check.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from activities.kubeapi import JSON, PODCLIQUES, PODS, Kube, ListWatch, pod_gated
from bench import interrupt
from grove import names

SELECTOR = names.managed_selector()


def _condition(obj: JSON, kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def pod_state(pod: JSON) -> dict[str, Any]:
    spec = pod.get("spec") or {}
    return {
        "gated": pod_gated(pod),
        "scheduled": bool(spec.get("nodeName")),
        "ready": _condition(pod, "Ready"),
        "deleting": bool(pod["metadata"].get("deletionTimestamp")),
    }


def pclq_state(pclq: JSON) -> dict[str, Any]:
    status = pclq.get("status") or {}
    breached = next((c.get("status") for c in status.get("conditions") or []
                     if c.get("type") == "MinAvailableBreached"), None)
    return {
        "ready_replicas": status.get("readyReplicas"),
        "breached": breached,
        "deleting": bool(pclq["metadata"].get("deletionTimestamp")),
        "deletion_timestamp": pclq["metadata"].get("deletionTimestamp"),
    }


@dataclass
class Tracked:
    kind: str
    namespace: str
    name: str
    uid: str
    labels: dict[str, str]
    history: list[tuple[float, dict[str, Any]]] = field(default_factory=list)  # (arrival, state) on each change
    gone_at: float | None = None

    @property
    def state(self) -> dict[str, Any]:
        return self.history[-1][1] if self.history else {}

    def first(self, predicate: Callable[[dict[str, Any]], bool], after: float = 0.0) -> float | None:
        """Arrival time of the first recorded state at or after `after` for which predicate holds."""
        for at, state in self.history:
            if at >= after and predicate(state):
                return at
        return None

    @property
    def seen(self) -> float:
        return self.history[0][0]


class Observer:
    """Follows pods and PodCliques with our managed-by label in the given namespaces (all when empty)."""

    def __init__(self, kube: Kube, namespaces: Iterable[str] = ()) -> None:
        self.kube = kube
        self.namespaces = set(namespaces)
        self.objects: dict[str, Tracked] = {}
        self.lock = threading.Lock()
        self._watches: list[ListWatch] = []
        self._synced = {PODS.plural: threading.Event(), PODCLIQUES.plural: threading.Event()}

    def watch_namespace(self, namespace: str) -> None:
        with self.lock:
            self.namespaces.add(namespace)

    def start(self) -> Observer:
        for resource in (PODS, PODCLIQUES):
            watch = ListWatch(self.kube, resource, None, functools.partial(self._noted, resource.kind),
                              label_selector=SELECTOR, on_synced=functools.partial(_set, self._synced[resource.plural]),
                              backoff=(0.2, 0.2))
            self._watches.append(watch.start(name=f"bench-observer-{resource.plural}"))
        for synced in self._synced.values():
            synced.wait(30)
        return self

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()
        for watch in self._watches:
            watch.stop(join_seconds=5)

    def __enter__(self) -> Observer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- queries (any thread) ------------------------------------------------------------------------------
    def select(self, kind: str, namespace: str | None = None, **labels: str) -> list[Tracked]:
        with self.lock:
            found = list(self.objects.values())
        return [t for t in found if t.kind == kind and (namespace is None or t.namespace == namespace)
                and all(t.labels.get(k) == v for k, v in labels.items())]

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str, interval: float = 0.1) -> float:
        """Poll until predicate() holds; returns when it did (wall clock). Raises TimeoutError naming `what`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return time.time()
            interrupt.pause(interval)
        raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")

    # --- the watches ----------------------------------------------------------------------------------------
    def _noted(self, kind: str, event: str, obj: JSON, _relisted: bool) -> None:
        self._note(kind, event, obj)

    def _note(self, kind: str, event: str, obj: JSON) -> None:
        now = time.time()
        meta = obj.get("metadata") or {}
        if self.namespaces and meta.get("namespace") not in self.namespaces:
            return
        uid = meta.get("uid", "")
        state = pod_state(obj) if kind == "Pod" else pclq_state(obj)
        with self.lock:
            tracked = self.objects.get(uid)
            if tracked is None:
                tracked = Tracked(kind, meta.get("namespace", ""), meta.get("name", ""), uid,
                                  dict(meta.get("labels") or {}))
                self.objects[uid] = tracked
            if event == "DELETED":
                tracked.gone_at = tracked.gone_at or now
            if not tracked.history or tracked.history[-1][1] != state:
                tracked.history.append((now, state))


def _set(event: threading.Event, _items: object) -> None:
    event.set()
