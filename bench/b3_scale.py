"""B3 scale: N replica workflows created at once, for each N on its own fresh stack and worker.

PodCliqueSets of `per_pcs` replicas (one clique of one pod each) are created back to back. Measured from the
first create: every pod released (gate gone), every pod Ready, every PodClique mirrored Ready (each workflow saw
its pod Ready), and the worker quiet again (no Kubernetes request but lease renewals and watches for 5 s).
At quiet: worker CPU seconds (from /proc, since the first create), peak RSS (VmHWM, the process's lifetime),
Kubernetes requests by verb (worker /metrics), Temporal history events of every replica workflow
(DescribeWorkflowExecution). Growth compares each size with the previous one, also per replica.
"""

from __future__ import annotations

import time
from typing import Any

from bench import replicas
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer
from bench.profile import Profiler
from bench.sampling import Delta, Reading, history_lengths, wait_quiet
from bench.stats import ratio, summary

MIB = 1024 * 1024


async def run(clusters: Clusters, *, sizes: tuple[int, ...] = (200, 500, 1000), per_pcs: int = 10,
              timeout: float = 1800.0, profile: bool = False) -> dict[str, Any]:
    results = []
    for size in sizes:
        async with clusters.cluster(pods=size) as cluster:
            results.append(await _one(cluster, size, per_pcs, timeout, profile))
    return {"per_pcs": per_pcs, "sizes": results, "growth": _growth(results)}


async def _one(cluster: BenchCluster, size: int, per_pcs: int, timeout: float, profile: bool) -> dict[str, Any]:
    namespace = cluster.namespace(f"b3-{size}")
    worker = cluster.worker(namespace)
    worker.wait_ready()
    fleet = replicas.plan(namespace, size, per_pcs)
    component_cpu = cluster.stack_cpu()
    with Observer(cluster.kube, [namespace]) as observer:
        profiler = Profiler(worker.pid, cluster.log_dir / f"py-spy-b3-{size}.txt").start() if profile else None
        before = Reading.take(worker)
        t0 = time.time()
        replicas.create_all(cluster, fleet)
        created = time.time()
        t_released, t_ready, t_settled = await replicas.settle(observer, fleet, timeout)
        t_quiet = await wait_quiet(worker, timeout=timeout)
        after = Reading.take(worker)
        profiled = profiler.stop() if profiler is not None else None
        per_pod = [p.first(lambda s: not s["gated"]) or 0.0 for p in observer.select("Pod", namespace)]
    delta = Delta.between(before, after)
    lengths = await history_lengths(cluster.client, replicas.workflow_ids(cluster, fleet))
    requests = delta.requests(foreground_only=True)
    stack_cpu = {k: round(v - component_cpu.get(k, 0.0), 1) for k, v in cluster.stack_cpu().items()}
    return {
        "replicas": size,
        "create_requests_s": round(created - t0, 2),
        "all_released_s": round(t_released - t0, 2),
        "all_ready_s": round(t_ready - t0, 2),
        "all_mirrored_ready_s": round(t_settled - t0, 2),
        "quiet_s": round(t_quiet - t0, 2),
        "release_after_first_create_s": summary([t - t0 for t in per_pod]),
        "worker_cpu_s": round(delta.cpu_seconds, 1),
        "worker_peak_rss_mib": round(after.peak_rss_bytes / MIB, 1),
        "worker_rss_before_mib": round(before.rss_bytes / MIB, 1),
        "kube_requests": int(requests),
        "kube_requests_per_replica": round(requests / size, 2),
        "kube_requests_by_verb": delta.requests_by_verb(),
        "kube_requests_by_verb_resource": delta.requests_by_verb_resource(),
        "history_events_per_replica": summary([float(v) for v in lengths.values()], 1),
        "history_events_total": sum(lengths.values()),
        "stack_cpu_s": stack_cpu,
        **({"worker_profile": profiled} if profiled else {}),
    }


def _growth(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each metric's ratio from one size to the next, beside the size ratio (linear growth: equal ratios)."""
    keys = ("all_released_s", "quiet_s", "worker_cpu_s", "kube_requests", "history_events_total")
    growth = []
    for small, large in zip(results, results[1:], strict=False):
        size_ratio = large["replicas"] / small["replicas"]
        entry: dict[str, Any] = {"from": small["replicas"], "to": large["replicas"], "size_ratio": round(size_ratio, 2)}
        for key in keys:
            r = ratio(large[key], small[key])
            entry[key] = {"ratio": r, "per_replica_ratio": ratio(r, size_ratio)}
        rss = ratio(large["worker_peak_rss_mib"] - large["worker_rss_before_mib"],
                    small["worker_peak_rss_mib"] - small["worker_rss_before_mib"])
        entry["worker_rss_growth_mib"] = {"ratio": rss, "per_replica_ratio": ratio(rss, size_ratio)}
        growth.append(entry)
    return growth
