"""B3 scale: N replica workflows created at once, for each N on its own fresh stack and worker.

PodCliqueSets of `per_pcs` replicas (one clique of one pod each) are created back to back. Measured from the
first create: every pod released (gate gone), every pod Ready, every PodClique mirrored Ready (each workflow saw
its pod Ready), and the worker quiet again (no Kubernetes request but lease renewals and watches for 5 s).
At quiet: worker CPU seconds (from /proc, since the first create), peak RSS (VmHWM, the process's lifetime),
Kubernetes requests by verb (worker /metrics), Temporal history events of every replica workflow
(DescribeWorkflowExecution). Growth compares each size with the previous one, also per replica.

The floor (issue 17) runs first, on a stack of its own: bench/direct.py creates the same PodCliqueSets and every
replica's objects from the product's own plan and manifests on 8 threads, and bench/floor.py (its own process, one
pod watch) removes each gate; it records when every gate is gone and when every pod is Ready (kube-scheduler
and KWOK with no product beside them: `all_ready_vs_floor` sets the product's all Ready against it). Every floor and
the product run on fresh stacks of their own (`--floors` picks the
floors; all three by default), and each phase prints its figures as a JSON line when it ends.

A second floor follows it (bench/temporal_floor.py): the same work, each replica's creates run as the one activity
of one minimal workflow; then a third, the same with a local activity (one workflow task per replica). Between the
direct floor and the local one lies what one workflow per replica costs on this Temporal server at the least;
between the Temporal floors and the product, what the product adds (observation, status, signals, timers).

Every phase also reports its stack's strain (bench/strain.py: KWOK plays kube-apiserver refused, pod watches it cut
off): a stack that falls behind slows whatever runs on it, so a ratio is read beside the two phases' strain.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from activities.backend import detect
from bench import direct, floor, replicas, report, temporal_floor
from bench.cluster import BenchCluster, Clusters
from bench.heaviest import heaviest_timelines
from bench.observer import Observer, Tracked
from bench.profile import Profiler
from bench.sampling import (
    Delta,
    Reading,
    histories_of,
    history_kinds,
    history_lengths,
    idle_tasks_per_replica,
    over_target,
    queue_waits,
    read_only_tasks_per_replica,
    sample_histories,
    wait_quiet,
)
from bench.stats import median_run, ranges, ratio, summary
from bench.workload import live_pods
from grove import names
from localstack.workerproc import WorkerProcess

MIB = 1024 * 1024
FLOOR_THREADS = 8
TARGET_SIZE, TARGET_RATIO = 1000, 1.5  # issue 17: at 1,000 replicas, all released within 1.5x the floor
TARGET_REQUESTS, TARGET_EVENTS = 10, 25  # issue 17: per 17-pod replica, PCS created to Available


FLOORS = ("direct", "temporal", "local")  # the direct client; one workflow per replica with an activity, a local one


async def run(clusters: Clusters, *, sizes: tuple[int, ...] = (200, 500, 1000), per_pcs: int = 10,
              pods_per_replica: int = 1, timeout: float = 1800.0, profile: bool = False,
              floors: tuple[str, ...] = FLOORS, repeat: int = 1) -> dict[str, Any]:
    """`repeat`: the product phase that many times per size, each on a fresh stack; the size reports the run with
    the median time to all released, and every run's figures beside it (one build's spread between runs is as
    large as many changes worth measuring)."""
    results: list[dict[str, Any]] = []
    for size in sizes:
        # Each phase on a stack of its own (a borrowed stack is shared): a phase that ran on what the one before
        # left behind would pay for it (at 5,000, 15,000 pods of the floors weighed on the product).
        measured: dict[str, dict[str, Any]] = {}
        try:
            for kind in floors:
                async with clusters.cluster(pods=size * pods_per_replica) as cluster:
                    if kind == "direct":
                        measured[kind] = await asyncio.to_thread(_floor, cluster, size, per_pcs, pods_per_replica,
                                                                 timeout)
                    else:
                        measured[kind] = await _temporal_floor(cluster, size, per_pcs, pods_per_replica, timeout,
                                                               local=kind == "local")
                _progress(f"{kind} floor", size, measured[kind])
            runs: list[dict[str, Any]] = []
            for _ in range(repeat):
                async with clusters.cluster(pods=size * pods_per_replica) as cluster:
                    runs.append(await _one(cluster, size, per_pcs, pods_per_replica, timeout, profile))
                if repeat > 1:
                    _progress(f"product run {len(runs)} of {repeat}", size, runs[-1])
            result = _median_run(runs)
        except TimeoutError as late:  # what this size measured until then, beside the sizes before it
            so_far = late.results if isinstance(late, report.Unfinished) else {"replicas": size}
            results.append(_beside_floors(so_far, measured))
            raise report.Unfinished(str(late), _assembled(results, per_pcs, pods_per_replica, floors)) from late
        _progress("product", size, result)
        results.append(_beside_floors(result, measured))
    return _assembled(results, per_pcs, pods_per_replica, floors)


SPREAD = ("all_released_s", "kube_requests_per_replica")  # per run, beside the history and CPU figures below


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time to all released (the lower of the two middle ones), with every run's figures."""
    if len(runs) == 1:
        return runs[0]
    median = dict(median_run(runs, "all_released_s"))
    median["product_runs"] = [
        {**{key: r[key] for key in SPREAD},
         "history_events_per_replica_p50": r["history_events_per_replica"]["p50"],
         "history_events_per_replica_mean": r["history_events_per_replica"]["mean"],
         "cpu_ms_per_replica": r["cpu_ms_per_replica"]} for r in runs]
    median["product_spread"] = ranges(median["product_runs"],
                                      (*SPREAD, "history_events_per_replica_p50", "history_events_per_replica_mean"))
    return median


def _beside_floors(result: dict[str, Any], measured: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The product's figures with each floor measured beside it and the ratio of all released to each."""
    for kind, key in (("direct", "floor"), ("temporal", "temporal_floor"), ("local", "temporal_floor_local")):
        if kind in measured:
            result[key] = measured[kind]
            result[f"all_released_vs_{key}"] = ratio(result.get("all_released_s"), measured[kind]["all_released_s"])
            if kind == "direct":
                result["all_ready_vs_floor"] = ratio(result.get("all_ready_s"), measured[kind]["all_ready_s"])
            if kind != "direct" and "direct" in measured:
                measured[kind]["all_released_vs_floor"] = ratio(measured[kind]["all_released_s"],
                                                                measured["direct"]["all_released_s"])
    return result


def _assembled(results: list[dict[str, Any]], per_pcs: int, pods_per_replica: int,
               floors: tuple[str, ...]) -> dict[str, Any]:
    """Every size's figures, their growth and the targets; a size that timed out counts for no target it missed
    measuring (its `all_released_s` is missing) and for no growth."""
    targets = {f"all_released_le_{TARGET_RATIO:g}x_floor_at_{r['replicas']}": r["all_released_vs_floor"] <= TARGET_RATIO
               for r in results if r["replicas"] == TARGET_SIZE and r.get("all_released_vs_floor") is not None}
    if pods_per_replica == 17:  # issue 17's shape for these two: created to Available, every replica
        for r in results:
            if "kube_requests_per_replica" in r:
                targets[f"kube_requests_le_{TARGET_REQUESTS}_per_replica_at_{r['replicas']}"] = \
                    r["kube_requests_per_replica"] <= TARGET_REQUESTS
            if "history_events_per_replica" in r:
                targets[f"history_events_le_{TARGET_EVENTS}_every_replica_at_{r['replicas']}"] = \
                    r["history_events_per_replica"].get("max", float("inf")) <= TARGET_EVENTS
    finished = [r for r in results if "all_released_s" in r and "quiet_s" in r]
    return {"per_pcs": per_pcs, "pods_per_replica": pods_per_replica, "floors": list(floors), "sizes": results,
            "growth": _growth(finished), "targets": targets}


def _progress(phase: str, size: int, result: dict[str, Any]) -> None:
    """Each phase's figures as soon as it ends: a later phase that fails or times out does not take them along."""
    brief = {k: v for k, v in result.items()
             if not isinstance(v, dict | list) or k in ("cpu_ms_per_replica", "stack_strain")}
    print(json.dumps({"b3_phase": phase, "replicas": size, **brief}), flush=True)


@contextlib.contextmanager
def _floor_namespace(cluster: BenchCluster, kind: str, size: int, per_pcs: int,
                     pods_per_replica: int) -> Iterator[tuple[str, replicas.Fleet, Observer]]:
    """A floor's own namespace, the gate-removing pod watch process (bench/floor.py) and an observer on it; yields
    the scheduling backend the product's worker (auto) chooses on this stack, the fleet's plan and the observer."""
    namespace = cluster.namespace(f"b3-{kind}-{size}")
    backend = detect(cluster.kube, "auto").default
    proc = floor.start(cluster.stack.kubeconfig, namespace, replicas.BASE_PODS[pods_per_replica],
                       cluster.log_dir / f"{kind}-{namespace}.log")
    try:
        with Observer(cluster.kube, [namespace]) as observer:
            yield backend, replicas.plan(namespace, size, per_pcs, pods_per_replica), observer
    finally:
        proc.terminate()
        proc.wait(10)


def _floor(cluster: BenchCluster, size: int, per_pcs: int, pods_per_replica: int, timeout: float) -> dict[str, Any]:
    """The same replicas made by a direct client (no Temporal), their gates removed from a pod watch."""
    with _floor_namespace(cluster, "floor", size, per_pcs, pods_per_replica) as (backend, fleet, observer):
        component_cpu, strain = cluster.stack_cpu(), cluster.strain()
        pods_total = size * pods_per_replica
        t0 = time.time()
        created = replicas.create_all(cluster, fleet)
        requests = len(created) + direct.materialise_all(cluster.kube, created, backend, FLOOR_THREADS)
        t_created = time.time()
        t_released = observer.wait(replicas.all_released(observer, fleet.namespace, pods_total), timeout,
                                   f"floor: {pods_total} pods released", 0.25)
        # When the same pods are Ready with no product running: kube-scheduler's and KWOK's share, which the
        # product's all_ready_s also carries.
        t_ready = observer.wait(replicas.all_ready(observer, fleet.namespace, pods_total), timeout,
                                f"floor: {pods_total} pods Ready", 0.25)
    # the stack's CPU for the same objects and gates: what the product's stack CPU compares with (no Temporal here)
    stack_cpu = {k: v for k, v in cluster.stack_cpu_since(component_cpu).items() if k != "temporal"}
    return {"backend": backend, "threads": FLOOR_THREADS, "create_requests_s": round(t_created - t0, 2),
            "all_released_s": round(t_released - t0, 2), "all_ready_s": round(t_ready - t0, 2),
            "kube_requests_per_replica": round((requests + pods_total) / size, 2),  # + one gate patch per pod
            "stack_cpu_s": stack_cpu, "cpu_ms_per_replica": _per_replica(stack_cpu, size),
            "stack_strain": cluster.strain_since(strain)}


async def _temporal_floor(cluster: BenchCluster, size: int, per_pcs: int, pods_per_replica: int,
                          timeout: float, *, local: bool = False) -> dict[str, Any]:
    """The same replicas, each made by one minimal workflow of one activity (bench/temporal_floor.py; `local`: a
    local activity): what one workflow per replica costs on this Temporal server at the least."""
    kind = "tlfloor" if local else "tfloor"
    with _floor_namespace(cluster, kind, size, per_pcs, pods_per_replica) as (backend, fleet, observer):
        component_cpu, strain = cluster.stack_cpu(), cluster.strain()
        pods_total = size * pods_per_replica
        t0 = time.time()
        created = replicas.create_all(cluster, fleet)

        def released(within: float) -> float:
            return observer.wait(replicas.all_released(observer, fleet.namespace, pods_total), within,
                                 f"temporal floor ({kind}): {pods_total} pods released", 0.25)

        result = await temporal_floor.run_all(cluster.client, Path(cluster.stack.kubeconfig), created, backend,
                                              FLOOR_THREADS, released, timeout,
                                              cluster.log_dir / f"temporal-floor-{kind}-{size}.log", local=local)
    began = result.pop("t0")
    stack_cpu = cluster.stack_cpu_since(component_cpu)
    stack_cpu["worker"] = result["worker_cpu_s"]  # the floor's own worker process
    result.update(backend=backend, all_released_s=round(result["all_released_s"] + (began - t0), 2),
                  kube_requests_per_replica=round((len(created) + result.pop("requests") + pods_total) / size, 2),
                  stack_cpu_s=stack_cpu, cpu_ms_per_replica=_per_replica(stack_cpu, size),
                  stack_strain=cluster.strain_since(strain))
    return result


async def _one(cluster: BenchCluster, size: int, per_pcs: int, pods_per_replica: int, timeout: float,
               profile: bool) -> dict[str, Any]:
    namespace = cluster.namespace(f"b3-{size}")
    worker = cluster.worker(namespace)
    worker.wait_ready()
    fleet = replicas.plan(namespace, size, per_pcs, pods_per_replica)
    component_cpu, strain = cluster.stack_cpu(), cluster.strain()
    with Observer(cluster.kube, [namespace]) as observer:
        profiler = Profiler(worker.pid, cluster.log_dir / f"py-spy-b3-{size}.txt").start() if profile else None
        before = Reading.take(worker)
        t0 = time.time()
        replicas.create_all(cluster, fleet)
        created = time.time()
        try:
            t_released, t_ready, t_settled = await replicas.settle(observer, fleet, timeout)
            t_quiet = await wait_quiet(worker, timeout=timeout)
        except TimeoutError as late:
            figures = _spent(cluster, worker, before, component_cpu, strain, size, profiler)
            raise report.Unfinished(str(late), {
                "replicas": size, "create_requests_s": round(created - t0, 2),
                "timed_out_after_s": round(time.time() - t0, 1), **_pods_so_far(observer, fleet, t0),
                **figures}) from late
        figures = _spent(cluster, worker, before, component_cpu, strain, size, profiler)
        pods = observer.select("Pod", namespace)
        released_at = [p.first(lambda s: not s["gated"]) for p in pods]
        ready_at = [p.first(lambda s: s["ready"]) for p in pods]
        per_pod = [released or 0.0 for released in released_at]
        spread = readiness_spread(pods, ready_at)
        to_ready = [ready - released for released, ready in zip(released_at, ready_at, strict=True)
                    if released is not None and ready is not None]
    workflow_ids = replicas.workflow_ids(cluster, fleet)  # a GET per PodCliqueSet for its UID: once
    lengths = await history_lengths(cluster.client, workflow_ids)
    everyone = await histories_of(cluster.client, workflow_ids)  # each history read once, for every reading below
    sampled = sample_histories(everyone)
    heavy = heaviest_timelines(everyone, lengths, pods, t0)
    return {
        "replicas": size,
        "create_requests_s": round(created - t0, 2),
        "all_released_s": round(t_released - t0, 2),
        "all_ready_s": round(t_ready - t0, 2),
        "all_mirrored_ready_s": round(t_settled - t0, 2),
        "quiet_s": round(t_quiet - t0, 2),
        "release_after_first_create_s": summary([t - t0 for t in per_pod]),
        "history_events_per_replica": summary([float(v) for v in lengths.values()], 1),
        "history_events_total": sum(lengths.values()),
        "history_event_kinds_per_replica": history_kinds(sampled),
        # Every replica's workflow tasks by kind, and the tail's over the events target apart: what it spent them on.
        "workflow_tasks": over_target(lengths, everyone, TARGET_EVENTS),
        "heaviest_replicas": heavy,  # their rounds beside their pods' milestones: what the tail's events answered
        "workflow_task_queue_wait": queue_waits(sampled),
        "idle_workflow_tasks_per_replica": idle_tasks_per_replica(sampled),
        "read_only_workflow_tasks_per_replica": read_only_tasks_per_replica(sampled),
        "replica_ready_spread_s": summary(spread),
        "pod_released_to_ready_s": summary(to_ready),  # the scheduler's and the kubelet's (KWOK's) pace
        **figures,
    }


def readiness_spread(pods: list[Tracked], ready_at: list[float | None]) -> list[float]:
    """Per replica, the seconds from its first pod Ready to its last (`ready_at`: when each of `pods` first was).
    A replica's status-only changes are held for the status window, so a replica whose pods come Ready over a
    longer spread takes a round more (a read-only workflow task and five history events) for each window it spans:
    the figure that explains history events rising with the machine's load."""
    first_last: dict[tuple[str, str], tuple[float, float]] = {}
    for pod, ready in zip(pods, ready_at, strict=True):
        key = (pod.labels.get(names.LABEL_PART_OF, ""), pod.labels.get(names.LABEL_PCS_REPLICA_INDEX, ""))
        if ready is None or not all(key):
            continue
        low, high = first_last.get(key, (ready, ready))
        first_last[key] = (min(low, ready), max(high, ready))
    return [high - low for low, high in first_last.values()]


def _spent(cluster: BenchCluster, worker: WorkerProcess, before: Reading, component_cpu: dict[str, float],
           strain: dict[str, int], size: int, profiler: Profiler | None) -> dict[str, Any]:
    """What the product spent since `before`: worker CPU and memory, Kubernetes requests, the stack's CPU and strain,
    and the worker's profile if one ran."""
    after = Reading.take(worker)
    profiled = profiler.stop() if profiler is not None else None
    delta = Delta.between(before, after)
    requests = delta.requests(foreground_only=True)
    stack_cpu = cluster.stack_cpu_since(component_cpu)
    return {
        "worker_cpu_s": round(delta.cpu_seconds, 1),
        "worker_peak_rss_mib": round(after.peak_rss_bytes / MIB, 1),
        "worker_rss_before_mib": round(before.rss_bytes / MIB, 1),
        "kube_requests": int(requests),
        "kube_requests_per_replica": round(requests / size, 2),
        "kube_requests_by_verb": delta.requests_by_verb(),
        "kube_requests_by_verb_resource": delta.requests_by_verb_resource(),
        "stack_cpu_s": stack_cpu,
        "cpu_ms_per_replica": _per_replica({"worker": delta.cpu_seconds, **stack_cpu}, size),
        "stack_strain": cluster.strain_since(strain),
        "nudges_per_replica": delta.nudges_per_replica(size),
        **({"worker_profile": profiled} if profiled else {}),
    }


def _pods_so_far(observer: Observer, fleet: replicas.Fleet, t0: float) -> dict[str, Any]:
    """How far a run that timed out got: pods wanted, live, released and Ready, and when each was released."""
    pods = live_pods(observer, fleet.namespace)
    released = [t - t0 for p in pods if (t := p.first(lambda s: not s["gated"])) is not None]
    return {"pods_wanted": fleet.replicas * fleet.pods_per_replica, "pods_live": len(pods),
            "pods_released": len(released), "pods_ready": sum(1 for p in pods if p.state["ready"]),
            "release_after_first_create_s": summary(released)}


def _per_replica(cpu_seconds: dict[str, float], size: int) -> dict[str, float]:
    """CPU milliseconds per replica of the worker, Temporal and kube-apiserver (issue 17 asks for these three)."""
    return {k: round(1000 * cpu_seconds[k] / size, 1) for k in ("worker", "temporal", "kube-apiserver")
            if k in cpu_seconds}


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
