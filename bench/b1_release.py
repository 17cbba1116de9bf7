"""B1 gate-release latency, product against floor, on the same apiserver in the same run.

Each of `replicas` PodCliqueSets (one replica: a base gang of 4 pods, two scaled gangs of 3) is created
`interval` seconds after the previous one, so latencies are not queueing behind each other. The floor
(bench/floor.py, its own process) gets the very same pods, created by this process in the product's order.
One extra replica first on each side warms caches and connections and is left out of the figures.

Per replica (times are arrivals at the benchmark's one observer, see bench/observer.py):
- base_release_from_create: PCS create request sent (floor: first pod create sent) → last base pod seen ungated.
- base_release_per_pod: a base pod first seen (created, gated) → seen ungated.
- scaled_release_after_base_scheduled: the last base pod seen bound to a node (the base gang is scheduled)
  → the last scaled pod seen ungated.

With `backends` (`--backends kube,none`), the whole measurement (floor, then product) runs once per gang scheduler
backend on the same stack, one after the other, each in namespaces of its own with a worker of its own (stopped
before the next backend starts). The product's PodCliqueSets carry the backend as their
`grove-temporal.io/scheduler-backend` annotation; the floor is the same gates-only floor every time (it creates no
native PodGroup: it is the least any controller must do to release the gates). Results are under
`backends.<name>`, so the table shows each backend's rows beside its own floor.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

from bench import floor
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer, Tracked
from bench.profile import Profiler
from bench.stats import against_floor
from bench.workload import create, live_pods, release_shape, sleep_until
from grove import names

BASE_PODS = 4
PODS_PER_REPLICA = 10
METRICS = ("base_release_from_create", "base_release_per_pod", "scaled_release_after_base_scheduled",
           "scaled_release_per_pod")


def _ungated(t: Tracked) -> float | None:
    return t.first(lambda s: not s["gated"])


def _scheduled(t: Tracked) -> float | None:
    return t.first(lambda s: s["scheduled"])


def _measure(observer: Observer, namespace: str, created: dict[str, float]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {m: [] for m in METRICS}
    for pcs, t0 in created.items():
        pods = live_pods(observer, namespace, **{names.LABEL_PART_OF: pcs})
        base = [p for p in pods if names.LABEL_BASE_PODGANG not in p.labels]
        scaled = [p for p in pods if names.LABEL_BASE_PODGANG in p.labels]
        base_out = [_ungated(p) for p in base]
        scaled_out = [_ungated(p) for p in scaled]
        sched = [_scheduled(p) for p in base]
        if len(base) != BASE_PODS or None in base_out or None in scaled_out or None in sched:
            raise RuntimeError(f"{namespace}/{pcs}: not every pod was seen released and scheduled")
        base_sched = max(s for s in sched if s is not None)
        samples["base_release_from_create"].append(max(t for t in base_out if t is not None) - t0)
        samples["base_release_per_pod"] += [t - p.seen for p, t in zip(base, base_out, strict=True) if t is not None]
        samples["scaled_release_after_base_scheduled"].append(max(t for t in scaled_out if t) - base_sched)
        samples["scaled_release_per_pod"] += [t - base_sched for t in scaled_out if t is not None]
    return samples


def _all_out(observer: Observer, namespace: str, count: int) -> bool:
    pods = live_pods(observer, namespace)
    return len(pods) >= count and all(not p.state.get("gated") and p.state.get("scheduled") for p in pods)


def _drive(cluster: BenchCluster, observer: Observer, namespace: str, replicas: int, interval: float,
           product: bool, timeout: float, backend: str | None = None) -> dict[str, float]:
    created: dict[str, float] = {}
    prefix = "p" if product else "f"
    for index in [-1, *range(replicas)]:
        name = f"{prefix}warm" if index < 0 else f"{prefix}{index:03d}"
        manifest = release_shape(name, namespace)
        if backend is not None:
            manifest["metadata"]["annotations"] = {names.ANNOTATION_SCHEDULER_BACKEND: backend}
        t0 = time.time()
        if product:
            create(cluster.kube, manifest)
        else:
            floor.create_replica(cluster.kube, manifest)
        if index >= 0:
            created[name] = t0
        sleep_until(t0 + interval)
    observer.wait(lambda: _all_out(observer, namespace, (replicas + 1) * PODS_PER_REPLICA), timeout,
                  f"every pod of {namespace} released and scheduled")
    return created


def _start_floor(cluster: BenchCluster, namespace: str) -> tuple[subprocess.Popen[bytes], Path]:
    log = cluster.log_dir / f"floor-{namespace}.log"
    return floor.start(Path(cluster.stack.kubeconfig), namespace, BASE_PODS, log), log


async def run(clusters: Clusters, *, replicas: int = 20, interval: float = 1.5, timeout: float = 300.0,
              profile: bool = False, backends: tuple[str, ...] = ()) -> dict[str, Any]:
    unknown = [b for b in backends if b not in names.BACKEND_VALUES]
    if unknown:
        raise ValueError(f"--backends: unknown backend(s) {', '.join(unknown)}; one of {', '.join(names.BACKEND_VALUES)}")
    rounds = max(len(backends), 1)
    async with clusters.cluster(pods=2 * rounds * (replicas + 1) * PODS_PER_REPLICA) as cluster:
        if not backends:
            return _run(cluster, replicas, interval, timeout, profile)
        by_backend = {b: _run(cluster, replicas, interval, timeout, profile, backend=b) for b in backends}
        return {"replicas": replicas, "backends": by_backend,
                "notes": [f"backends run one after the other on one stack, in this order: {', '.join(backends)}; "
                          "each against its own gates-only floor measured just before it"]}


def _run(cluster: BenchCluster, replicas: int, interval: float, timeout: float, profile: bool,
         backend: str | None = None) -> dict[str, Any]:
    tag = f"-{backend}" if backend else ""
    product_ns, floor_ns = cluster.namespace(f"b1-product{tag}"), cluster.namespace(f"b1-floor{tag}")
    worker = cluster.worker(product_ns)
    floor_proc, _ = _start_floor(cluster, floor_ns)
    try:
        worker.wait_ready()
        with Observer(cluster.kube, [product_ns, floor_ns]) as observer:
            floor_created = _drive(cluster, observer, floor_ns, replicas, interval, False, timeout)
            profiler = Profiler(worker.pid, cluster.log_dir / "py-spy-b1.txt").start() if profile else None
            product_created = _drive(cluster, observer, product_ns, replicas, interval, True, timeout, backend)
            profiled = profiler.stop() if profiler is not None else None
            floor_samples = _measure(observer, floor_ns, floor_created)
            product_samples = _measure(observer, product_ns, product_created)
    finally:
        floor_proc.terminate()
        floor_proc.wait(10)
        if backend is not None:
            worker.stop()
    product, floor_, ratios = against_floor(product_samples, floor_samples, METRICS)
    scaled_p99 = product["scaled_release_after_base_scheduled"].get("p99")
    return {
        "replicas": replicas,
        "pods_per_replica": {"base": BASE_PODS, "scaled": PODS_PER_REPLICA - BASE_PODS},
        "product_s": product,
        "floor_s": floor_,
        "ratio_product_to_floor": ratios,
        "targets": {
            "scaled_release_p99_le_1s": scaled_p99 is not None and scaled_p99 <= 1.0,
            "scaled_release_p99_le_3x_floor": (ratios["scaled_release_after_base_scheduled"]["p99"] or 99) <= 3.0,
        },
        **({"worker_profile": profiled} if profiled else {}),
    }
