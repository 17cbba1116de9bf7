"""End-to-end helpers: a real worker process, and the cluster-side moves a test makes (apply a PCS, make pods fail
their readiness probe the way a kubelet reports it, wait for the real objects to reach a state).

Nothing here touches workflow state or our status mirror: tests act on Kubernetes the way a cluster would and
observe the real objects and the workflow's own answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import yaml
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client, WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError

from activities.kubeapi import JSON, PODCLIQUES, PODCLIQUESETS, PODGANGS, PODS, SCALINGGROUPS, Kube, ListWatch
from grove import names
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from localstack.workerproc import WorkerProcess  # noqa: F401 (the e2e tests import it from here)
from worker.replica_client import query_status
from workflows.contract import replica_workflow_id
from workflows.messages import Phase, ReplicaStatus

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
T = TypeVar("T")


def load_example(name: str, namespace: str, **overrides: Any) -> JSON:
    doc: JSON = yaml.safe_load((EXAMPLES / name).read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def clique(name: str, replicas: int, min_available: int, cpu: str = "10m") -> JSON:
    return {
        "name": name,
        "spec": {
            "roleName": name,
            "replicas": replicas,
            "minAvailable": min_available,
            "podSpec": {
                "containers": [{"name": name, "image": "registry.k8s.io/pause:3.10",
                                "resources": {"requests": {"cpu": cpu, "memory": "16Mi"}}}]
            },
        },
    }


def pcs_manifest(name: str, namespace: str, *, replicas: int = 1, cliques: list[JSON],
                 scaling_groups: list[JSON] | None = None, termination_delay: str | None = None,
                 annotations: dict[str, str] | None = None) -> JSON:
    template: JSON = {"cliques": cliques}
    if scaling_groups:
        template["podCliqueScalingGroups"] = scaling_groups
    if termination_delay:
        template["terminationDelay"] = termination_delay
    meta: JSON = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET, "metadata": meta,
            "spec": {"replicas": replicas, "template": template}}


def is_ready(pod: JSON) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def is_scheduled(pod: JSON) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def is_gated(pod: JSON) -> bool:
    return any(g.get("name") == names.SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


class Cluster:
    """The test's view of one namespace."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace

    # --- PCS ---
    def apply(self, manifest: JSON) -> JSON:
        return self.kube.create(PODCLIQUESETS, self.namespace, copy.deepcopy(manifest))

    def pcs(self, name: str) -> JSON | None:
        return self.kube.get(PODCLIQUESETS, self.namespace, name)

    def patch_pcs(self, name: str, patch: JSON) -> JSON:
        return self.kube.patch(PODCLIQUESETS, self.namespace, name, patch)

    def delete_pcs(self, name: str) -> None:
        self.kube.delete(PODCLIQUESETS, self.namespace, name)

    # --- reads ---
    def pods(self, selector: str | None = None) -> list[JSON]:
        return [p for p in self.kube.list_items(PODS, self.namespace, label_selector=selector)
                if not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self, count: int) -> list[JSON] | None:
        """All live pods, when there are exactly `count` and every one is Ready."""
        pods = self.pods()
        return pods if len(pods) == count and all(is_ready(p) for p in pods) else None

    def pods_of(self, pclq: str) -> list[JSON]:
        return self.pods(f"{names.LABEL_PODCLIQUE}={pclq}")

    def pclqs(self) -> dict[str, JSON]:
        return {o["metadata"]["name"]: o for o in self.kube.list_items(PODCLIQUES, self.namespace)}

    def live_pclq_uids(self) -> dict[str, str]:
        return {n: o["metadata"]["uid"] for n, o in self.pclqs().items() if not o["metadata"].get("deletionTimestamp")}

    def pod_gangs(self) -> dict[str, JSON]:
        return {o["metadata"]["name"]: o for o in self.kube.list_items(PODGANGS, self.namespace)}

    def pclq(self, name: str) -> JSON | None:
        return self.kube.get(PODCLIQUES, self.namespace, name)

    def condition(self, kind_plural: str, name: str, condition_type: str) -> JSON | None:
        """A status condition of a PodClique ('pclq'), PodCliqueScalingGroup ('pcsg') or PodCliqueSet ('pcs')."""
        resource = {"pclq": PODCLIQUES, "pcsg": SCALINGGROUPS, "pcs": PODCLIQUESETS}[kind_plural]
        obj = self.kube.get(resource, self.namespace, name)
        conditions = ((obj or {}).get("status") or {}).get("conditions") or []
        return next((c for c in conditions if c.get("type") == condition_type), None)

    def inventory(self) -> dict[str, str]:
        """Every live object a replica is made of, as 'Kind/name' -> UID: any delete or recreate changes it."""
        found: dict[str, str] = {}
        for resource in (PODCLIQUES, SCALINGGROUPS, PODGANGS, PODS):
            for obj in self.kube.list_items(resource, self.namespace):
                if not obj["metadata"].get("deletionTimestamp"):
                    found[f"{resource.kind}/{obj['metadata']['name']}"] = obj["metadata"]["uid"]
        return found

    def gates(self) -> dict[str, bool]:
        """Live pod name -> still carrying our scheduling gate."""
        return {p["metadata"]["name"]: is_gated(p) for p in self.pods()}

    def events(self, reason: str | None = None) -> list[JSON]:
        from activities.kubeapi import EVENTS

        items = self.kube.list_items(EVENTS, self.namespace)
        return [e for e in items if reason is None or e.get("reason") == reason]

    # --- what a kubelet would report ---
    def fail_readiness(self, pod: str, failing: bool = True) -> None:
        """Make the pod's readiness probe fail (KWOK plays the kubelet and reports Ready=False)."""
        value = FAKE_READINESS_FAIL if failing else None
        self.kube.patch(PODS, self.namespace, pod, {"metadata": {"annotations": {FAKE_READINESS_ANNOTATION: value}}})

    def workflow_id(self, pcs: str, replica: int) -> str:
        obj = self.pcs(pcs)
        assert obj is not None, f"PodCliqueSet {pcs} not found"
        return replica_workflow_id(self.namespace, pcs, obj["metadata"]["uid"], replica)


def follow_pods_and_pclqs(kube: Kube, namespace: str, note: Callable[[str, str, JSON], object], *,
                          name: str, label_selector: str | None = None) -> list[ListWatch]:
    """Follow the namespace's pods and PodCliques from threads: note(kind, ADDED | MODIFIED | DELETED, object)."""
    watches = []
    for resource in (PODS, PODCLIQUES):
        watch = ListWatch(kube, resource, namespace,
                          lambda event, obj, _relisted, kind=resource.kind: note(kind, event, obj),
                          label_selector=label_selector, watch_timeout_seconds=60, backoff=(0.2, 0.2))
        watches.append(watch.start(name=f"{name}-{resource.plural}"))
    return watches


def stop_watches(watches: list[ListWatch]) -> None:
    for watch in watches:
        watch.stop()
    for watch in watches:
        watch.stop(join_seconds=5)


class Timeline:
    """Watches the namespace's pods and PodCliques from a thread and notes, on the wall clock, when each object
    (by UID) was first seen, released (our gate gone), scheduled, Ready, and marked for deletion. Watch events
    arrive within milliseconds, so differences between these moments are the latencies a user would see."""

    EVENTS = ("seen", "ungated", "scheduled", "ready", "deleting")

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.objects: dict[str, tuple[str, str]] = {}  # uid -> (kind, name)
        self.moments: dict[str, dict[str, float]] = {}  # uid -> event -> time.time()
        self._watches: list[ListWatch] = []
        self._lock = threading.Lock()

    def start(self) -> Timeline:
        self._watches = follow_pods_and_pclqs(self.kube, self.namespace, lambda kind, _event, obj: self._note(kind, obj),
                                              name="timeline")
        return self

    def stop(self) -> None:
        stop_watches(self._watches)

    def _note(self, kind: str, obj: JSON) -> None:
        now = time.time()
        meta = obj["metadata"]
        uid = meta["uid"]
        flags = {"seen": True, "deleting": bool(meta.get("deletionTimestamp"))}
        if kind == "Pod":
            flags |= {"ungated": not is_gated(obj), "scheduled": is_scheduled(obj), "ready": is_ready(obj)}
        with self._lock:
            self.objects[uid] = (kind, meta["name"])
            moments = self.moments.setdefault(uid, {})
            for event, happened in flags.items():
                if happened:
                    moments.setdefault(event, now)

    def of(self, kind: str, name: str) -> list[dict[str, float]]:
        """The moments of every incarnation (UID) of one object, oldest first."""
        with self._lock:
            found = [dict(self.moments[uid]) for uid, key in self.objects.items() if key == (kind, name)]
        return sorted(found, key=lambda m: m.get("seen", 0.0))

    def latencies(self, kind: str, names_: list[str], start: str, end: str, *, since: float = 0.0) -> list[float]:
        """end - start for each incarnation of these objects first seen after `since`, where both happened."""
        result = []
        for name in names_:
            for moments in self.of(kind, name):
                if moments.get("seen", 0.0) >= since and start in moments and end in moments:
                    result.append(moments[end] - moments[start])
        return result


def describe(latencies: list[float]) -> str:
    if not latencies:
        return "n/a"
    ordered = sorted(latencies)
    return f"median {ordered[len(ordered) // 2] * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms (n={len(ordered)})"


class Replica:
    """The workflow side of one PCS replica: its status query and its handle."""

    def __init__(self, client: Client, cluster: Cluster, pcs: str, replica: int = 0) -> None:
        self.client = client
        self.workflow_id = cluster.workflow_id(pcs, replica)
        self.handle: WorkflowHandle[Any, Any] = client.get_workflow_handle(self.workflow_id)

    async def status(self) -> ReplicaStatus:
        result: ReplicaStatus = await bounded(
            lambda: query_status(self.handle, ReplicaStatus, rpc_timeout=timedelta(seconds=5)),
            f"status query of {self.workflow_id}")
        return result

    async def try_status(self) -> ReplicaStatus | None:
        """None while no worker can answer (e.g. right after the worker process was killed)."""
        try:
            return await self.status()
        except (RPCError, WorkflowQueryFailedError, RuntimeError):  # no worker can answer right now
            return None

    async def wait(self, predicate: Callable[[ReplicaStatus], bool], *, timeout: float = 30,
                   what: str = "") -> ReplicaStatus:
        async def check() -> ReplicaStatus | None:
            status = await self.try_status()
            return status if status is not None and predicate(status) else None

        result: ReplicaStatus = await await_for(check, timeout=timeout, what=what or "replica status")
        return result

    async def wait_phase(self, phase: Phase, *, timeout: float = 30) -> ReplicaStatus:
        return await self.wait(lambda s: s.phase is phase, timeout=timeout, what=f"phase {phase.value}")


def wait_for(predicate: Callable[[], T], *, timeout: float = 60, interval: float = 0.1, what: str = "") -> T:
    """Poll until predicate returns something truthy; fail with `what` and the last value otherwise."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or predicate}; last value: {last!r}")


# Each call of the tests' Temporal client that waits on the server (a status query, a history read) is bounded by an
# asyncio timer and made once more when cut off, so that a call that stalls names itself. (The 900 s stall that
# prompted this, in test_scaling's first test, was a replay: worker/doctor.py has_a_workflow_task. A timer cannot
# cut that one off: the Replayer ignores the cancellation.)
CALL_BOUND_SECONDS = 30.0


async def bounded(call: Callable[[], Awaitable[T]], what: str, seconds: float = CALL_BOUND_SECONDS,
                  attempts: int = 2) -> T:
    """`call()`, cut off after `seconds` by an asyncio timer and made again, `attempts` times in all; the last
    cut-off fails the test, naming `what`."""
    for _ in range(attempts - 1):
        try:
            return await asyncio.wait_for(call(), seconds)
        except TimeoutError:
            print(f"{what}: no answer within {seconds:.0f}s; asking once more")
    try:
        return await asyncio.wait_for(call(), seconds)
    except TimeoutError:
        raise AssertionError(f"{what}: no answer within {seconds:.0f}s ({attempts} attempts)") from None


async def await_for(predicate: Callable[[], Any], *, timeout: float = 60, interval: float = 0.1,
                    what: str = "") -> Any:
    """wait_for for async tests: the predicate may be sync or return an awaitable."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what or predicate}; last value: {last!r}")


def http_get(port: int, path: str) -> tuple[int, str]:
    """GET from a worker's HTTP endpoint: (status, body); (0, "") while nothing listens."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except urllib.error.URLError:
        return 0, ""


@contextlib.asynccontextmanager
async def observe_held_in_flight(stack: Any, handle: WorkflowHandle[Any, Any],
                                 timeout: float = 30) -> AsyncIterator[None]:
    """An activity held in flight for real: the kube-apiserver frozen (SIGSTOP), the replica nudged, and its
    observe_replica activity started and waiting on the apiserver. The apiserver is thawed when the block ends."""
    apiserver = stack.components["kube-apiserver"].process.pid
    assert apiserver is not None
    os.kill(apiserver, signal.SIGSTOP)
    try:
        await handle.signal("nudge")

        async def observing() -> bool:
            description = await handle.describe()
            return any(a.activity_type.name == "observe_replica"
                       and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                       for a in description.raw_description.pending_activities)

        await await_for(observing, timeout=timeout, what="observe_replica in flight")
        yield
    finally:
        os.kill(apiserver, signal.SIGCONT)
