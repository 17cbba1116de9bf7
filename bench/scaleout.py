"""Scale-out (issue 17): 1, 2, 3 workers on one task queue, each count on its own fresh stack.

Per worker count: `replicas` one-pod replicas (PodCliqueSets of `per_pcs`, terminationDelay `delay`) are created
back to back and settle; then every replica's pod is made NotReady at once, so every replica breaches, is
gang-terminated when its delay runs out, is materialised again and has its new pod's gate released. Measured:
time to all released after the creates, time from the breaches to every replica settled again, CPU of the workers
together and of the stack's processes, Kubernetes requests of all workers, and how the activity attempts spread
over the workers (ActivityTaskStarted identities). Then bench/once.py checks, from the histories, the watch and the
Events, that every gate release, termination and recreate happened once whichever worker ran it.

The watcher is leader-elected, so one worker reads the cluster and signals; the workflow and activity work is what
spreads. On two cores more workers add processes, not CPU: the figures say what that costs.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from activities.kubeapi import EVENTS
from bench import replicas
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer
from bench.once import Actions, judge
from bench.sampling import Delta, Reading, wait_quiet
from bench.stats import ratio
from bench.workload import fail_readiness, live_pods, settled_pclqs
from faults.history import HistoryReader
from grove import names
from localstack.workerproc import WorkerProcess


async def run(clusters: Clusters, *, replicas: int = 300, per_pcs: int = 10, worker_counts: tuple[int, ...] = (1, 2, 3),
              delay: float = 5.0, timeout: float = 900.0) -> dict[str, Any]:
    results = []
    for count in worker_counts:
        async with clusters.cluster(pods=2 * replicas) as cluster:
            results.append(await _one(cluster, count, replicas, per_pcs, delay, timeout))
    base = results[0]
    for result in results:
        result["all_released_vs_first"] = ratio(result["all_released_s"], base["all_released_s"])
        result["recovered_vs_first"] = ratio(result["breach_to_all_settled_s"], base["breach_to_all_settled_s"])
    return {"replicas": replicas, "per_pcs": per_pcs, "termination_delay_s": delay, "worker_counts": results,
            "targets": {"no_duplicate_action": all(not r["duplicates"] for r in results),
                        "work_spread_over_every_worker": all(r["workers_that_ran_activities"] == r["workers"]
                                                             for r in results)}}


async def _wait_quiet_all(workers: list[WorkerProcess], timeout: float) -> float:
    return max(await asyncio.gather(*(wait_quiet(w, timeout=timeout) for w in workers)))


async def _one(cluster: BenchCluster, count: int, size: int, per_pcs: int, delay: float,
               timeout: float) -> dict[str, Any]:
    namespace = cluster.namespace(f"scaleout-{count}")
    # The first leads the watcher: started alone, so that it takes the Lease; the others then stand by for it.
    workers = [cluster.worker(namespace, name="w0")]
    workers[0].wait_ready()
    workers += [cluster.worker(namespace, name=f"w{k}") for k in range(1, count)]
    for worker in workers[1:]:
        worker.wait_ready(leader=False)
    fleet = replicas.plan(namespace, size, per_pcs, termination_delay=f"{delay:g}s")
    stack_before = cluster.stack_cpu()
    before = [Reading.take(w) for w in workers]
    with Observer(cluster.kube, [namespace]) as observer:
        t0 = time.time()
        replicas.create_all(cluster, fleet)
        t_released, _, t_settled = await replicas.settle(observer, fleet, timeout)
        await _wait_quiet_all(workers, timeout)
        originals = [t for t in observer.select("PodClique", namespace) if t.gone_at is None]
        t_breach = time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda p: fail_readiness(cluster.kube, namespace, p[2]), fleet.pods()))

        def recovered() -> bool:
            if not all(t.gone_at or t.state.get("deleting") for t in originals):
                return False
            pods = live_pods(observer, namespace)
            return (len(settled_pclqs(observer, namespace)) >= size and len(pods) >= size
                    and all(not p.state["gated"] and p.state["ready"] for p in pods))

        t_recovered = await asyncio.to_thread(observer.wait, recovered, timeout + delay,
                                              f"{size} replicas terminated and settled again", 0.25)
        t_quiet = await _wait_quiet_all(workers, timeout)
        after = [Reading.take(w) for w in workers]
        pclqs: dict[str, list[str]] = defaultdict(list)
        for t in observer.select("PodClique", namespace):
            pclqs[t.name].append(t.uid)
        pods: dict[tuple[str, str], list[str]] = defaultdict(list)
        ungated = []
        for t in observer.select("Pod", namespace):
            pods[(t.labels.get(names.LABEL_PODCLIQUE, ""), t.name)].append(t.uid)
            if t.first(lambda s: not s["gated"]) is not None:
                ungated.append(t.uid)
    stack_cpu = cluster.stack_cpu_since(stack_before)
    deltas = [Delta.between(b, a) for b, a in zip(before, after, strict=True)]
    actions, events_per_replica = await _read_histories(cluster, fleet)
    kube_events = cluster.kube.list_items(EVENTS, namespace)
    verdict = judge(actions, breaches=size, pod_incarnations=pods, pclq_incarnations=pclqs, ungated_pods=ungated,
                    events=kube_events)
    requests = sum(d.requests(foreground_only=True) for d in deltas)
    attempts = sorted(actions.by_worker.values(), reverse=True)
    return {
        "workers": count,
        "replicas": size,
        "all_released_s": round(t_released - t0, 2),
        "all_mirrored_ready_s": round(t_settled - t0, 2),
        "released_per_s": round(size / (t_released - t0), 1),
        "breach_to_all_settled_s": round(t_recovered - t_breach, 2),
        "quiet_after_breach_s": round(t_quiet - t_breach, 2),
        "worker_cpu_s": round(sum(d.cpu_seconds for d in deltas), 1),
        "worker_cpu_s_each": [round(d.cpu_seconds, 1) for d in deltas],
        "worker_peak_rss_mib_each": [round(a.peak_rss_bytes / 2**20, 1) for a in after],
        "stack_cpu_s": stack_cpu,
        "kube_requests_per_replica": round(requests / size, 2),
        # All workers together: where a second or third worker's extra requests go.
        "kube_requests_by_verb_resource": dict(sum((Counter(d.requests_by_verb_resource()) for d in deltas),
                                                   Counter())),
        # Per worker: a worker whose routine reads go to the apiserver has a cache that cannot serve them (two
        # workers once did for half their reads: a kind idle since one cache listed it, docs/benchmarks.md).
        "observe_reads_each": [d.observe_reads() for d in deltas],
        "history_events_per_replica": round(sum(events_per_replica.values()) / max(1, len(events_per_replica)), 1),
        "activity_attempts_per_worker": attempts,
        "workers_that_ran_activities": len(attempts),
        "once": verdict.counts,
        "duplicates": verdict.duplicates,
        "workers_alive_at_end": sum(1 for w in workers if w.proc is not None and w.proc.poll() is None),
    }


async def _read_histories(cluster: BenchCluster, fleet: replicas.Fleet) -> tuple[Actions, dict[str, int]]:
    """Every run of every replica workflow (the continue-as-new chains), read once each."""
    reader = HistoryReader(cluster.client)
    semaphore = asyncio.Semaphore(16)

    async def one(workflow_id: str) -> None:
        async with semaphore:
            await reader.workflow(workflow_id)

    await asyncio.gather(*(one(w) for w in replicas.workflow_ids(cluster, fleet)))
    actions = Actions()
    lengths: dict[str, int] = defaultdict(int)
    for history in reader.to_replay.values():
        actions.add_run(history.workflow_id, history.events)
        lengths[history.workflow_id] += len(history.events)
    return actions, lengths
