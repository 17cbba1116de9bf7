"""A pod and PodClique watch for the rolling update tests: every state each pod was seen in, in order, so a test can
recompute from the real objects how many PCS replicas were unavailable at every instant and how often each pod was
recreated."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from activities.kubeapi import JSON, Kube, ListWatch
from grove import names
from tests.e2e.harness import follow_pods_and_pclqs, is_ready, stop_watches


@dataclass(frozen=True)
class Shape:
    """The replica structure the test applied: standalone clique -> minAvailable; scaling group cliques and counts."""

    standalone: dict[str, int]
    group_cliques: dict[str, int] = field(default_factory=dict)
    group: str = ""
    group_replicas: int = 0
    group_min: int = 1


@dataclass
class PodState:
    name: str
    uid: str
    replica: int
    pclq: str
    image: str
    template_hash: str
    ready: bool
    deleting: bool


class RolloutWatch:
    def __init__(self, kube: Kube, namespace: str, pcs: str, replicas: int, shape: Shape) -> None:
        self.kube, self.namespace, self.pcs, self.replicas, self.shape = kube, namespace, pcs, replicas, shape
        self.pods: dict[str, PodState] = {}  # uid -> latest state (deleted pods removed)
        self.incarnations: dict[str, list[tuple[str, str]]] = {}  # pod name -> [(uid, image)] in order seen
        self.unavailable_samples: list[tuple[float, tuple[int, ...]]] = []
        self.update_in_progress: set[str] = set()  # PCLQs seen with MinAvailableBreached reason UpdateInProgress
        self._lock = threading.Lock()
        self._watches: list[ListWatch] = []

    def start(self) -> RolloutWatch:
        self._watches = follow_pods_and_pclqs(self.kube, self.namespace, self._note, name="rollout-watch",
                                              label_selector=f"{names.LABEL_PART_OF}={self.pcs}")
        return self

    def stop(self) -> None:
        stop_watches(self._watches)

    def _note(self, kind: str, event: str, obj: JSON) -> None:
        meta = obj["metadata"]
        with self._lock:
            if kind == "PodClique":
                for c in (obj.get("status") or {}).get("conditions") or []:
                    if c.get("type") == names.CONDITION_MIN_AVAILABLE_BREACHED and c.get("reason") == "UpdateInProgress":
                        self.update_in_progress.add(meta["name"])
                return
            labels = meta.get("labels") or {}
            if event == "DELETED":
                self.pods.pop(meta["uid"], None)
            else:
                image = ((obj.get("spec") or {}).get("containers") or [{}])[0].get("image", "")
                self.pods[meta["uid"]] = PodState(
                    name=meta["name"], uid=meta["uid"], replica=int(labels.get(names.LABEL_PCS_REPLICA_INDEX, -1)),
                    pclq=labels.get(names.LABEL_PODCLIQUE, ""), image=image,
                    template_hash=labels.get(names.LABEL_POD_TEMPLATE_HASH, ""), ready=is_ready(obj),
                    deleting=bool(meta.get("deletionTimestamp")))
                seen = self.incarnations.setdefault(meta["name"], [])
                if meta["uid"] not in [u for u, _ in seen]:
                    seen.append((meta["uid"], image))
            self.unavailable_samples.append((time.time(), self._unavailable()))

    def _ready_by_pclq(self) -> dict[str, int]:
        ready: dict[str, int] = {}
        for pod in self.pods.values():
            if pod.ready and not pod.deleting:
                ready[pod.pclq] = ready.get(pod.pclq, 0) + 1
        return ready

    def _unavailable(self) -> tuple[int, ...]:
        """PCS replicas not available now (grove.availability.replica_available, recomputed from pods)."""
        ready = self._ready_by_pclq()
        down = []
        for i in range(self.replicas):
            ok = all(ready.get(f"{self.pcs}-{i}-{c}", 0) >= m for c, m in self.shape.standalone.items())
            if self.shape.group:
                good = sum(1 for j in range(self.shape.group_replicas)
                           if all(ready.get(f"{self.pcs}-{i}-{self.shape.group}-{j}-{c}", 0) >= m
                                  for c, m in self.shape.group_cliques.items()))
                ok = ok and good >= self.shape.group_min
            if not ok:
                down.append(i)
        return tuple(down)

    # --- what the tests ask ---
    def unavailable_since(self, since: float) -> list[tuple[float, tuple[int, ...]]]:
        with self._lock:
            return [(t, d) for t, d in self.unavailable_samples if t >= since]

    def recreated(self) -> dict[str, int]:
        """pod name -> how many incarnations after the first."""
        with self._lock:
            return {name: len(seen) - 1 for name, seen in self.incarnations.items()}

    def live(self) -> list[PodState]:
        with self._lock:
            return [p for p in self.pods.values() if not p.deleting]
