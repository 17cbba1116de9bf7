"""`bench scale`: a PodCliqueScalingGroup scaled through its scale subresource (as an HPA or `kubectl scale` writes
it) → the new replica's scaled PodGang released, product against floor, on the same apiserver in the same run.

`replicas` PodCliqueSets (bench/scale_floor.scale_shape: a base gang of 4 pods, PCSG `sg` at 1 replica) are created
and settled. Then, `interval` seconds apart, each one's PCSG gets `kubectl scale --replicas=2`, a merge patch of the
scale subresource: the worker creates the new replica's PodCliques, its scaled PodGang (and native PodGroup under
the kube backend) and 3 gated pods, and releases them (the base gang is scheduled already). The floor
(bench/scale_floor.py, its own process) gets the very same scale writes on PCSG objects of its own and creates the
same objects and removes the same gates with nothing in between. One extra PCS first on each side warms caches
and is left out.

Per scale write (times are arrivals at the benchmark's one observer, bench/observer.py; t0 = the patch sent):
- scale_write_to_released: t0 → the last new pod seen ungated (the scaled gang's gates released).
- scale_write_to_scheduled: t0 → the last new pod seen bound to a node.
- scale_write_to_created: t0 → the last new pod first seen (objects created).
"""

from __future__ import annotations

import subprocess
import time
from typing import Any

from activities.kubeapi import SCALINGGROUPS
from bench import procs
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer, Tracked
from bench.scale_floor import pcsg_of, scale_shape, scaling_group_object
from bench.stats import against_floor
from bench.workload import create, live_pods, sleep_until
from grove import names

BASE_PODS = 4
NEW_PODS = 3  # a leader and two workers: PCSG replica 1, alone in scaled PodGang <pcsg>-0
METRICS = ("scale_write_to_released", "scale_write_to_scheduled", "scale_write_to_created")


def _new_pods(observer: Observer, namespace: str, pcs: str) -> list[Tracked]:
    return live_pods(observer, namespace, **{names.LABEL_PART_OF: pcs, names.LABEL_PCSG_REPLICA_INDEX: "1"})


def _measure(observer: Observer, namespace: str, written: dict[str, float]) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {m: [] for m in METRICS}
    for pcs, t0 in written.items():
        pods = _new_pods(observer, namespace, pcs)
        released = [p.first(lambda s: not s["gated"]) for p in pods]
        scheduled = [p.first(lambda s: s["scheduled"]) for p in pods]
        if len(pods) != NEW_PODS or None in released or None in scheduled:
            raise RuntimeError(f"{namespace}/{pcs}: the scaled replica's pods were not all seen released and bound")
        samples["scale_write_to_released"].append(max(t for t in released if t is not None) - t0)
        samples["scale_write_to_scheduled"].append(max(t for t in scheduled if t is not None) - t0)
        samples["scale_write_to_created"].append(max(p.seen for p in pods) - t0)
    return samples


def _settled(observer: Observer, namespace: str, count: int) -> bool:
    pods = live_pods(observer, namespace)
    return len(pods) >= count and all(not p.state.get("gated") and p.state.get("scheduled") for p in pods)


def _scale(cluster: BenchCluster, namespace: str, pcs: str, replicas: int) -> None:
    cluster.kube.patch(SCALINGGROUPS, namespace, pcsg_of(pcs), {"spec": {"replicas": replicas}}, subresource="scale")


def _drive(cluster: BenchCluster, observer: Observer, namespace: str, replicas: int, interval: float,
           product: bool, timeout: float) -> dict[str, float]:
    prefix = "p" if product else "f"
    pcs_names = [f"{prefix}warm", *(f"{prefix}{i:03d}" for i in range(replicas))]
    for pcs in pcs_names:
        if product:
            create(cluster.kube, scale_shape(pcs, namespace))
        else:
            cluster.kube.create(SCALINGGROUPS, namespace, scaling_group_object(pcs, namespace))
    if product:
        observer.wait(lambda: _settled(observer, namespace, len(pcs_names) * BASE_PODS), timeout,
                      f"every base gang of {namespace} released and scheduled")
    written: dict[str, float] = {}
    for pcs in pcs_names:
        t0 = time.time()
        _scale(cluster, namespace, pcs, 2)
        if not pcs.endswith("warm"):
            written[pcs] = t0
        sleep_until(t0 + interval)
    expected = len(pcs_names) * (NEW_PODS + (BASE_PODS if product else 0))
    observer.wait(lambda: _settled(observer, namespace, expected), timeout,
                  f"every scaled replica of {namespace} released and scheduled")
    return written


def _start_floor(cluster: BenchCluster, namespace: str) -> subprocess.Popen[bytes]:
    return procs.start_module("bench.scale_floor", ["--kubeconfig", str(cluster.stack.kubeconfig),
                                                    "--namespace", namespace],
                              cluster.log_dir / f"scale-floor-{namespace}.log", b"scale floor: watching",
                              "the scale floor")


async def run(clusters: Clusters, *, replicas: int = 20, interval: float = 1.5, timeout: float = 300.0) -> dict[str, Any]:
    async with clusters.cluster(pods=2 * (replicas + 1) * (BASE_PODS + NEW_PODS)) as cluster:
        return _run(cluster, replicas, interval, timeout)


def _run(cluster: BenchCluster, replicas: int, interval: float, timeout: float) -> dict[str, Any]:
    product_ns, floor_ns = cluster.namespace("scale-product"), cluster.namespace("scale-floor")
    worker = cluster.worker(product_ns)
    floor_proc = _start_floor(cluster, floor_ns)
    try:
        worker.wait_ready()
        with Observer(cluster.kube, [product_ns, floor_ns]) as observer:
            floor_written = _drive(cluster, observer, floor_ns, replicas, interval, False, timeout)
            product_written = _drive(cluster, observer, product_ns, replicas, interval, True, timeout)
            floor_samples = _measure(observer, floor_ns, floor_written)
            product_samples = _measure(observer, product_ns, product_written)
    finally:
        floor_proc.terminate()
        floor_proc.wait(10)
    product, floor_, ratios = against_floor(product_samples, floor_samples, METRICS)
    released_p99 = product["scale_write_to_released"].get("p99")
    return {
        "scale_writes": replicas,
        "pods_per_scale_write": NEW_PODS,
        "product_s": product,
        "floor_s": floor_,
        "ratio_product_to_floor": ratios,
        "targets": {
            "released_p99_le_1s": released_p99 is not None and released_p99 <= 1.0,
            "released_p99_le_3x_floor": (ratios["scale_write_to_released"]["p99"] or 99) <= 3.0,
        },
    }
