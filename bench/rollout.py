"""`bench rollout` (issue 12): an image change across N PCS replicas of 17 pods each, against a floor measured on
the same stack in the same run.

Workload: PodCliqueSets of `per_pcs` replicas (default 10 × 10 = 100 replicas, 1,700 pods). One replica:
frontend 4 pods (minAvailable 3) and decode 5 (minAvailable 4), standalone; PCSG prefill × 2 (minAvailable 1) of
leader 1 + worker 3. Every component has the default maxUnavailable 1; the PCSG counts whole PCSG replicas.

Product: once every pod is Ready and the worker quiet, every PCS's image changes (one patch each). Measured from
the first patch: every pod at its clique's new pod-template hash and Ready; every PCS's status updatedReplicas =
replicas; the worker quiet again (its Kubernetes requests in between, from its /metrics, without lease renewals
and watches).

Floor: the least a controller must do for the same update on the same apiserver. The same pods (the product's own
pod manifests, without owner and gate) in their own namespace, then the same update with the same budget, by a
direct client with no Temporal: per PCS one thread, replica after replica; within a replica every component
recreates one unit at a time (delete, wait until the pod is gone, which its name needs, create it with the new
image, wait until Ready), the components side by side. It reads through one pod watch of its own; its requests
are its writes plus that watch.

Both are seen by the same watch (bench.observer): from it, the replicas unavailable at every instant (a replica is
unavailable while a standalone clique has fewer than minAvailable Ready pods, or fewer than minAvailable PCSG
replicas have every clique at minAvailable), their maximum over the fleet and within one PCS.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from activities.kubeapi import JSON, PODCLIQUESETS, PODS, Kube, ListWatch
from bench import interrupt
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer, Tracked
from bench.sampling import Delta, Reading, wait_quiet
from bench.stats import ratio
from bench.workload import clique, create, pcs_manifest
from grove import manifests, names
from grove.plan import plan_replica
from grove.rollout import pod_template_hashes
from grove.validation import parse_pcs

OLD_IMAGE = "registry.k8s.io/pause:3.10"
NEW_IMAGE = "registry.k8s.io/pause:3.10-rollout"
PODS_PER_REPLICA = 17
MIN_AVAILABLE = {"frontend": 3, "decode": 4, "leader": 1, "worker": 3}
PCSG, PCSG_MIN = "prefill", 1


def shape(name: str, namespace: str, replicas: int, image: str = OLD_IMAGE) -> JSON:
    cliques = [clique("frontend", 4, 3), clique("decode", 5, 4), clique("leader", 1, 1), clique("worker", 3, 3)]
    for c in cliques:
        c["spec"]["podSpec"]["containers"][0]["image"] = image
    return pcs_manifest(name, namespace, replicas=replicas, cliques=cliques,
                        scaling_groups=[{"name": PCSG, "replicas": 2, "minAvailable": PCSG_MIN,
                                         "cliqueNames": ["leader", "worker"]}])


def fleet(replicas: int, per_pcs: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    index = 0
    while replicas > 0:
        counts[f"r{index:03d}"] = min(per_pcs, replicas)
        replicas -= per_pcs
        index += 1
    return counts


def new_hashes(namespace: str) -> dict[str, str]:
    pcs, problems = parse_pcs(shape("x", namespace, 1, NEW_IMAGE))
    assert pcs is not None and not problems, problems
    return pod_template_hashes(pcs)


# --- unavailability, replayed from the watch ------------------------------------------------------------------
def unavailable_replicas(pods: list[Tracked], since: float) -> tuple[int, int]:
    """(max replicas unavailable at once over the fleet, max within one PCS) from `since` on."""
    events: list[tuple[float, str, bool]] = []  # (at, uid, ready)
    where: dict[str, tuple[str, int, str]] = {}  # uid -> (pcs, replica, pclq)
    for pod in pods:
        labels = pod.labels
        where[pod.uid] = (labels.get(names.LABEL_PART_OF, ""), int(labels.get(names.LABEL_PCS_REPLICA_INDEX, -1)),
                          labels.get(names.LABEL_PODCLIQUE, ""))
        for at, state in pod.history:
            events.append((at, pod.uid, bool(state.get("ready")) and not state.get("deleting")))
        if pod.gone_at is not None:
            events.append((pod.gone_at, pod.uid, False))
    events.sort()
    ready: dict[tuple[str, int], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    worst = worst_one = 0
    down: set[tuple[str, int]] = set()
    for at, uid, is_ready in events:
        pcs, replica, pclq = where[uid]
        members = ready[(pcs, replica)][pclq]
        if is_ready:
            members.add(uid)
        else:
            members.discard(uid)
        if _available(pcs, replica, ready[(pcs, replica)]):
            down.discard((pcs, replica))
        else:
            down.add((pcs, replica))
        if at >= since:
            worst = max(worst, len(down))
            per_pcs: dict[str, int] = defaultdict(int)
            for name, _ in down:
                per_pcs[name] += 1
            worst_one = max(worst_one, max(per_pcs.values(), default=0))
    return worst, worst_one


def _available(pcs: str, replica: int, ready: dict[str, set[str]]) -> bool:
    prefix = f"{pcs}-{replica}-"
    for name in ("frontend", "decode"):
        if len(ready.get(prefix + name, ())) < MIN_AVAILABLE[name]:
            return False
    good = sum(1 for j in range(2) if all(len(ready.get(f"{prefix}{PCSG}-{j}-{c}", ())) >= MIN_AVAILABLE[c]
                                          for c in ("leader", "worker")))
    return good >= PCSG_MIN


def _all_at(observer: Observer, namespace: str, count: int, hashes: dict[str, str] | None) -> bool:
    live = [t for t in observer.select("Pod", namespace) if t.gone_at is None and not t.state.get("deleting")]
    if len(live) != count or not all(t.state.get("ready") for t in live):
        return False
    if hashes is None:
        return True
    return all(t.labels.get(names.LABEL_POD_TEMPLATE_HASH) == hashes[_clique_of(t.labels)] for t in live)


def _clique_of(labels: dict[str, str]) -> str:
    return labels.get(names.LABEL_PODCLIQUE, "").rsplit("-", 1)[-1]


# --- the product ------------------------------------------------------------------------------------------------
async def _product(cluster: BenchCluster, observer: Observer, counts: dict[str, int],
                   timeout: float) -> dict[str, Any]:
    namespace = cluster.namespace("rollout")
    observer.watch_namespace(namespace)
    worker = cluster.worker(namespace)
    worker.wait_ready()
    total = sum(counts.values()) * PODS_PER_REPLICA
    for name, n in counts.items():
        create(cluster.kube, shape(name, namespace, n))
    await asyncio.to_thread(observer.wait, lambda: _all_at(observer, namespace, total, None), timeout,
                            f"{total} pods Ready", 0.5)
    await wait_quiet(worker, timeout=timeout)
    hashes = new_hashes(namespace)
    before = Reading.take(worker)
    t0 = time.time()
    for name in counts:
        cliques = shape(name, namespace, counts[name], NEW_IMAGE)["spec"]["template"]["cliques"]
        cluster.kube.patch(PODCLIQUESETS, namespace, name, {"spec": {"template": {"cliques": cliques}}})
    patched = time.time()
    t_pods = await asyncio.to_thread(observer.wait, lambda: _all_at(observer, namespace, total, hashes), timeout,
                                     f"{total} pods at the new template and Ready", 0.5)

    def status_updated() -> bool:
        for name, n in counts.items():
            status = (cluster.kube.get(PODCLIQUESETS, namespace, name) or {}).get("status") or {}
            if status.get("updatedReplicas") != n or not (status.get("updateProgress") or {}).get("updateEndedAt"):
                return False
        return True

    t_status = await asyncio.to_thread(observer.wait, status_updated, timeout, "every PCS updatedReplicas", 0.5)
    t_quiet = await wait_quiet(worker, timeout=timeout)
    after = Reading.take(worker)
    delta = Delta.between(before, after)
    pods = observer.select("Pod", namespace)
    recreated = sum(1 for t in pods if t.seen > t0)
    worst, worst_one = unavailable_replicas(pods, t0)
    return {
        "patch_requests_s": round(patched - t0, 2),
        "all_pods_updated_ready_s": round(t_pods - t0, 2),
        "all_status_updated_s": round(t_status - t0, 2),
        "quiet_s": round(t_quiet - t0, 2),
        "pods_recreated": recreated,
        "max_unavailable_replicas": worst,
        "max_unavailable_replicas_one_pcs": worst_one,
        "kube_requests": int(delta.requests(foreground_only=True)),
        "kube_requests_by_verb": delta.requests_by_verb(),
        "worker_cpu_s": round(delta.cpu_seconds, 1),
    }


# --- the floor ------------------------------------------------------------------------------------------------
class FloorRollout:
    """The direct client: its own pod watch (name -> (uid, Ready)), writes counted."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.pods: dict[str, tuple[str, bool]] = {}
        self.changed = threading.Condition()
        self.writes: dict[str, int] = defaultdict(int)
        self._lock = threading.Lock()
        self.watch = ListWatch(kube, PODS, namespace, self._on_event, label_selector=names.managed_selector(),
                               watch_timeout_seconds=3600, backoff=(0.2, 0.2))

    def _on_event(self, kind: str, pod: JSON, _relisted: bool) -> None:
        meta = pod["metadata"]
        with self.changed:
            if kind == "DELETED":
                if self.pods.get(meta["name"], ("",))[0] == meta["uid"]:
                    self.pods.pop(meta["name"], None)
            else:
                ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (pod.get("status") or {}).get("conditions") or [])
                self.pods[meta["name"]] = (meta["uid"], ready and not meta.get("deletionTimestamp"))
            self.changed.notify_all()

    def _count(self, verb: str) -> None:
        with self._lock:
            self.writes[verb] += 1

    def bodies(self, manifest: JSON, replica: int) -> dict[str, JSON]:
        """The product's own pod manifests of one replica, without owner and scheduling gate."""
        pcs, problems = parse_pcs(manifest)
        assert pcs is not None and not problems, problems
        plan = plan_replica(pcs, replica)
        found = {}
        for pclq in plan.pod_cliques:
            for index in range(len(pclq.pod_names)):
                body = copy.deepcopy(manifests.pod_manifest(pcs, plan, pclq.name, index))
                body["metadata"].pop("ownerReferences", None)
                body["spec"].pop("schedulingGates", None)
                found[body["metadata"]["name"]] = body
        return found

    def create(self, body: JSON) -> None:
        self._count("create")
        self.kube.create(PODS, self.namespace, body)

    def delete(self, name: str) -> None:
        with self.changed:
            uid = self.pods.get(name, ("",))[0]
        self._count("delete")
        self.kube.delete(PODS, self.namespace, name, uid=uid)

    def _refresh(self, names: list[str]) -> None:
        """Pods the watch has not shown in the awaited state 2 s after the floor's write are read once from the
        apiserver (a counted GET), so a slow watch never makes the floor create a pod that already exists, and a
        pod KWOK's stale by-name delete removed is seen gone (the wedge seen in CI)."""
        for name in names:
            self._count("get")
            pod = self.kube.get(PODS, self.namespace, name)
            with self.changed:
                if pod is None:
                    self.pods.pop(name, None)
                else:
                    ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                                for c in (pod.get("status") or {}).get("conditions") or [])
                    self.pods[name] = (pod["metadata"]["uid"],
                                       ready and not pod["metadata"].get("deletionTimestamp"))
                self.changed.notify_all()

    def wait(self, predicate: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("floor: timed out")
                interrupt.check()
                self.changed.wait(min(left, 1.0))

    def roll_replica(self, new_bodies: dict[str, JSON], pcs: str, replica: int, timeout: float) -> None:
        """Every component one unit at a time, side by side: delete, gone, create, Ready."""
        prefix = f"{pcs}-{replica}-"
        components: list[list[list[str]]] = []
        for name in ("frontend", "decode"):
            components.append([[n] for n in sorted(new_bodies) if n.startswith(prefix + name + "-")])
        components.append([[n for n in sorted(new_bodies) if n.startswith(f"{prefix}{PCSG}-{j}-")] for j in range(2)])
        position = [0] * len(components)
        phase: list[str] = ["idle"] * len(components)
        written_at = [0.0] * len(components)
        deadline = time.monotonic() + timeout
        while any(p < len(c) for p, c in zip(position, components, strict=True)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"floor: replica {prefix} not updated")
            interrupt.check()
            for i, units in enumerate(components):
                if position[i] >= len(units):
                    continue
                unit = units[position[i]]
                with self.changed:
                    state = {n: self.pods.get(n) for n in unit}
                if phase[i] == "idle":
                    for n in unit:
                        self.delete(n)
                    phase[i] = "deleting"
                    written_at[i] = time.monotonic()
                elif phase[i] == "deleting" and not all(s is None for s in state.values()):
                    if time.monotonic() - written_at[i] > 2.0:
                        self._refresh([n for n, s in state.items() if s is not None])
                        written_at[i] = time.monotonic()
                elif phase[i] == "deleting":
                    for n in unit:
                        self.create(new_bodies[n])
                    phase[i] = "creating"
                    written_at[i] = time.monotonic()
                elif phase[i] == "creating" and all(s is not None and s[1] for s in state.values()):
                    phase[i] = "idle"
                    position[i] += 1
                elif phase[i] == "creating" and time.monotonic() - written_at[i] > 2.0:
                    self._refresh([n for n, s in state.items() if s is None or not s[1]])
                    with self.changed:
                        missing = [n for n in unit if n not in self.pods]
                    for n in missing:
                        # KWOK deletes by name: a stale delete of the old pod, queued in KWOK, can remove the new pod
                        # created under the same name within milliseconds (seen in kwok.log); create it again
                        self.create(new_bodies[n])
                    written_at[i] = time.monotonic()
            with self.changed:
                self.changed.wait(0.05)


    def settle(self, bodies: dict[str, JSON], timeout: float) -> None:
        """After the roll, every pod exists and is Ready. KWOK's stale by-name delete can also remove a new pod after
        the floor saw it Ready and moved on (kwok.log: "Patch pod" Ready, then "Delete pod" 13 ms later); a pod
        missing 2 s is read once (a counted GET) and, if really gone, created again, as any controller would."""
        deadline = time.monotonic() + timeout
        while True:
            with self.changed:
                missing = [n for n in bodies if n not in self.pods]
                if not missing and all(self.pods[n][1] for n in bodies):
                    return
                self.changed.wait(2.0)
            if time.monotonic() > deadline:
                raise TimeoutError(f"floor: {len(missing)} pods missing after the roll")
            interrupt.check()
            with self.changed:
                missing = [n for n in missing if n not in self.pods]
            self._refresh(missing)
            with self.changed:
                gone = [n for n in missing if n not in self.pods]
            for name in gone:
                self.create(bodies[name])
            if gone:
                interrupt.pause(2.0)


async def _floor(cluster: BenchCluster, observer: Observer, counts: dict[str, int], timeout: float) -> dict[str, Any]:
    namespace = cluster.namespace("rollout-floor")
    observer.watch_namespace(namespace)
    floor = FloorRollout(cluster.kube, namespace)
    floor.watch.start(name="bench-rollout-floor")
    total = sum(counts.values()) * PODS_PER_REPLICA
    old = {(name, i): floor.bodies(shape(name, namespace, n), i) for name, n in counts.items() for i in range(n)}
    new = {(name, i): floor.bodies(shape(name, namespace, n, NEW_IMAGE), i)
           for name, n in counts.items() for i in range(n)}
    try:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(floor.create, [b for bodies in old.values() for b in bodies.values()]))
        await asyncio.to_thread(observer.wait, lambda: _all_at(observer, namespace, total, None), timeout,
                                f"floor: {total} pods Ready", 0.5)
        # The floor decides from its own watch, so it starts only once that watch has seen every pod Ready: a pod
        # it has not seen yet would look already gone right after its delete, and its create would meet the old pod.
        every = [n for bodies in old.values() for n in bodies]
        await asyncio.to_thread(floor.wait, lambda: all(floor.pods.get(n, ("", False))[1] for n in every), timeout)
        floor.writes.clear()
        hashes = new_hashes(namespace)
        t0 = time.time()

        def roll(pcs: str) -> None:
            for i in range(counts[pcs]):
                floor.roll_replica(new[(pcs, i)], pcs, i, timeout)

        with ThreadPoolExecutor(len(counts)) as pool:
            await asyncio.gather(*(asyncio.get_running_loop().run_in_executor(pool, roll, pcs) for pcs in counts))
        await asyncio.to_thread(floor.settle, {n: b for bodies in new.values() for n, b in bodies.items()}, timeout)
        t_done = time.time()
        t_seen = await asyncio.to_thread(observer.wait, lambda: _all_at(observer, namespace, total, hashes),
                                         timeout, "floor: every pod at the new template and Ready", 0.5)
    finally:
        floor.watch.stop()
    pods = observer.select("Pod", namespace)
    worst, worst_one = unavailable_replicas(pods, t0)
    return {
        "all_pods_updated_ready_s": round(max(t_done, t_seen) - t0, 2),
        "pods_recreated": sum(1 for t in pods if t.seen > t0),
        "max_unavailable_replicas": worst,
        "max_unavailable_replicas_one_pcs": worst_one,
        "kube_requests": sum(floor.writes.values()) + 2,  # its writes, plus its one list and watch
        "kube_requests_by_verb": dict(floor.writes),
    }


async def run(clusters: Clusters, *, replicas: int = 100, per_pcs: int = 10, timeout: float = 1800.0
              ) -> dict[str, Any]:
    counts = fleet(replicas, per_pcs)
    pods = replicas * PODS_PER_REPLICA
    async with clusters.cluster(pods=2 * pods) as cluster:
        with Observer(cluster.kube, ["-none-"]) as observer:
            product = await _product(cluster, observer, counts, timeout)
            floor = await _floor(cluster, observer, counts, timeout)
    return {
        "replicas": replicas,
        "pcs_count": len(counts),
        "per_pcs": per_pcs,
        "pods": pods,
        "product": product,
        "floor": floor,
        "time_vs_floor": ratio(product["all_pods_updated_ready_s"], floor["all_pods_updated_ready_s"]),
        "requests_vs_floor": ratio(product["kube_requests"], floor["kube_requests"]),
        "notes": [f"{len(counts)} PodCliqueSets x {per_pcs} replicas x {PODS_PER_REPLICA} pods; maxUnavailable 1 "
                  "per component; the floor rolls the same pods with the same budget, no Temporal, same stack"],
    }
