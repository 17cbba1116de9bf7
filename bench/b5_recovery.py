"""B5 recovery: SIGKILL the worker while N replicas are active; how long until every replica's workflow makes
progress again.

Progress, precisely: after the SIGKILL, one pod of every replica is made NotReady (its readiness probe fails, as
KWOK reports it); a replica has made progress when its PodClique's status, written by the replica workflow's
mirror activity, shows readyReplicas=0. That takes the whole path on the new worker: the watcher (after leader
election) sees the pod, nudges the workflow, the workflow (replayed on the new worker) observes the cluster,
evaluates, and its activity writes the mirror. The new worker process is started the moment the old one is dead.

Also reported: when the new worker answered /readyz, when it took the watcher's Lease, when each pod was seen
NotReady (KWOK's part, not ours), and from every replica's history when its nudge arrived, when its workflow task
left the dead worker's sticky queue and when a live worker started and completed it (bench/recovery_timeline.py).

The floor, measured after the recovery in the same run on the same stack and replicas: every pod is made Ready
again, and once every replica shows it and the worker is quiet, the same NotReady wave is made with the worker alive
and warm, and measured the same way. The kill's cost is the difference (`over_floor_s`); the floor itself is what
the wave of changes costs this stack (the benchmark's patches, KWOK, the watch, a round per replica).

With `--after-rollout` every PodCliqueSet's image changes first, and the kill comes once the rolling update is done
and the worker quiet: the replicas' runs then hold a rolling update, as they do after any image bump, and the new
worker replays them. Every run reports the replica runs' history lengths at the kill (what a cold worker replays).

With one worker, the run ends with two more restarts with nothing changed (bench/quiet_restart.py): one with the
Lease's nudge watermark removed (every replica nudged and replayed, as before there was one), one with it kept.

With `--workers 2` (issue 17) two workers share the task queue; the one leading the watcher is killed and not
restarted: the standby carries on alone. The standby calls itself a worker of another host
(GROVE_TEMPORAL_IDENTITY), so it cannot take the dead leader's Lease early by seeing its PID gone: it waits the
Lease out, as on a real second node.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from activities.kubeapi import LEASES, PODCLIQUESETS
from bench import interrupt, procs, quiet_restart, recovery_timeline, replicas, rollout
from bench.cluster import BenchCluster, Clusters
from bench.observer import Observer, Tracked
from bench.profile import Profiler
from bench.sampling import current_runs, wait_quiet
from bench.stats import median_run, ranges, summary
from bench.workload import fail_readiness, live_pods, settled_pclqs
from grove import names
from localstack.workerproc import WorkerProcess


async def run(clusters: Clusters, *, replicas: int = 100, per_pcs: int = 10, timeout: float = 900.0,
              profile: bool = False, workers: int = 1, after_rollout: bool = False, repeat: int = 1) -> dict[str, Any]:
    """`repeat`: the whole run that many times, each on a fresh stack; reported is the run with the median time to
    all progressed after the kill, with every run's figures beside it (the floor alone moved 31-37 s between runs
    of one build)."""
    if workers not in (1, 2):
        raise ValueError(f"--workers: 1 (kill and restart) or 2 (kill the leader, the standby carries on), "
                         f"got {workers}")
    runs = []
    for _ in range(repeat):
        async with clusters.cluster(pods=replicas) as cluster:
            runs.append(await _run(cluster, replicas, per_pcs, timeout, profile, workers, after_rollout))
    return _median_run(runs)


# each run's figures beside the median's (`runs`), and their range (`spread`)
SPREAD = ("all_progressed_after_kill_s", "over_floor_s", "new_worker_cpu_s")


def _median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    if len(runs) == 1:
        return runs[0]
    median = dict(median_run(runs, "all_progressed_after_kill_s"))
    median["runs"] = [{**{key: r[key] for key in SPREAD},
                       "floor_all_progressed_s": r["floor_worker_alive"]["all_progressed_s"],
                       "floor_worker_cpu_s": r["floor_worker_alive"]["worker_cpu_s"]} for r in runs]
    median["spread"] = ranges(median["runs"], list(median["runs"][0]))
    return median


def _lease_holder(cluster: BenchCluster, worker: WorkerProcess) -> str:
    lease = cluster.kube.get(LEASES, *quiet_restart.watcher_lease(worker))
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")


def _watch_worker(cluster: BenchCluster, worker: WorkerProcess, timeout: float) -> tuple[float, float]:
    """Poll until the new worker answers /readyz and holds the Lease; returns both moments."""
    ready_at = leader_at = 0.0
    deadline = time.monotonic() + timeout
    while (not ready_at or not leader_at) and time.monotonic() < deadline:
        if not ready_at and (worker.readyz() or {}).get("worker") == "ok":
            ready_at = time.time()
        if not leader_at and _lease_holder(cluster, worker) == worker.identity:
            leader_at = time.time()
        interrupt.pause(0.1)
    return ready_at, leader_at


def _roll_all(cluster: BenchCluster, observer: Observer, fleet: replicas.Fleet, timeout: float) -> float:
    """Change every PodCliqueSet's image; wait until every pod was recreated and is Ready. Returns the seconds taken."""
    namespace, started = fleet.namespace, time.time()
    before = {t.uid for t in live_pods(observer, namespace)}
    for pcs, count in fleet.counts.items():
        cliques = replicas.manifest(fleet, pcs, count)["spec"]["template"]["cliques"]
        for clique in cliques:
            clique["spec"]["podSpec"]["containers"][0]["image"] = rollout.NEW_IMAGE
        cluster.kube.patch(PODCLIQUESETS, namespace, pcs, {"spec": {"template": {"cliques": cliques}}})

    def rolled() -> bool:
        pods = [t for t in live_pods(observer, namespace) if not t.state.get("deleting")]
        return (len(pods) == fleet.replicas * fleet.pods_per_replica
                and all(t.uid not in before and t.state["ready"] for t in pods))

    return observer.wait(rolled, timeout, f"{fleet.replicas} replicas rolled to a new image", 0.25) - started


async def _run(cluster: BenchCluster, n: int, per_pcs: int, timeout: float, profile: bool,
               workers: int, after_rollout: bool) -> dict[str, Any]:
    namespace = cluster.namespace("b5")
    worker = cluster.worker(namespace)
    worker.wait_ready()
    standby = None
    if workers == 2:
        standby = cluster.worker(namespace, name="standby",
                                 extra_env={"GROVE_TEMPORAL_IDENTITY": f"standby-host-{namespace}"})
        standby.wait_ready(leader=False)
    fleet = replicas.plan(namespace, n, per_pcs)
    with Observer(cluster.kube, [namespace]) as observer:
        replicas.create_all(cluster, fleet)
        await replicas.settle(observer, fleet, timeout)
        await wait_quiet(worker, timeout=timeout)
        rolled_s = None
        if after_rollout:
            rolled_s = await asyncio.to_thread(_roll_all, cluster, observer, fleet, timeout)
            await wait_quiet(worker, timeout=timeout)
        workflow_ids = replicas.workflow_ids(cluster, fleet)
        runs = await current_runs(cluster.client, workflow_ids)
        pclqs = {t.name: t for t in observer.select("PodClique", namespace) if t.gone_at is None}
        pods = {t.name: t for t in observer.select("Pod", namespace) if t.gone_at is None}
        stack_cpu = cluster.stack_cpu()
        # the standby has run since before the kill: count its CPU from the kill, as a restarted worker's is
        survivor_cpu_before = procs.sample(standby.pid).cpu_seconds if standby is not None else 0.0
        killed = time.time()
        worker.kill()
        if standby is None:
            worker.start()
        survivor = standby or worker
        watching = asyncio.create_task(asyncio.to_thread(_watch_worker, cluster, survivor, timeout))

        changing = asyncio.create_task(asyncio.to_thread(_change_pods, cluster, fleet, True))
        profiler = None
        if profile:
            await asyncio.to_thread(survivor.wait_ready, 60.0, False)
            profiler = Profiler(survivor.pid, cluster.log_dir / f"py-spy-b5-{n}.txt").start()

        await asyncio.to_thread(observer.wait, lambda: all(_progressed(t, killed) for t in pclqs.values()), timeout,
                                f"{n} replicas progressed after the kill", 0.25)
        profiled = profiler.stop() if profiler is not None else None
        worker_cpu = procs.sample(survivor.pid).cpu_seconds - survivor_cpu_before
        stack_cpu = cluster.stack_cpu_since(stack_cpu)
        changed = await changing
        ready_at, leader_at = await watching
        floor = await _floor_worker_alive(cluster, observer, fleet, survivor, pclqs, pods, timeout)
    phases = await recovery_timeline.read(cluster.client, namespace, killed)
    # after the timeline is read: these restarts add their own events to the histories
    restarts = await quiet_restart.measure(cluster, worker, workflow_ids, timeout) if standby is None else None
    progressed_at, not_ready_at = _wave(pclqs, pods, killed)
    progress, not_ready = list(progressed_at.values()), list(not_ready_at.values())
    all_progressed = max(progress) - killed
    return {
        "replicas": n,
        "workers": workers,
        "killed": "the watcher's leader; the standby carries on" if workers == 2 else "the only worker; restarted",
        **({"rolled_to_new_image_s": round(rolled_s, 1)} if rolled_s is not None else {}),
        # each replica's current run at the kill: what a worker that starts cold replays before its first round
        "history_events_at_kill": summary([float(r.events) for r in runs.values()], 1),
        # handed over by continue-as-new since they started
        "replicas_in_a_later_run_at_kill": sum(r.handed_over for r in runs.values()),
        "all_progressed_after_kill_s": round(all_progressed, 2),
        "progressed_after_kill_s": summary([t - killed for t in progress]),
        "worker_ready_after_kill_s": round(ready_at - killed, 2) if ready_at else None,
        "watcher_lease_taken_after_kill_s": round(leader_at - killed, 2) if leader_at else None,
        "pods_patched_after_kill_s": round(changed - killed, 2),
        "pods_seen_notready_after_kill_s": summary([t - killed for t in not_ready]),
        # Each replica from its own pod seen NotReady to its PodClique's status showing it: the product's share, apart
        # from how long the benchmark's 1,000 readiness patches take to land while the stack recovers.
        "progressed_after_pod_notready_s": summary(_after_own_pod(progressed_at, not_ready_at)),
        "new_worker_cpu_s": round(worker_cpu, 1),
        # from the histories: nudge arrived, sticky task timed out, a live worker started and completed the task
        "recovery_phases": phases,
        # the same NotReady wave with the worker alive, measured after the recovery on the same stack and replicas
        "floor_worker_alive": floor,
        "over_floor_s": round(all_progressed - floor["all_progressed_s"], 2),
        "stack_cpu_s": stack_cpu,
        # the worker killed and started again twice more with nothing changed: without and with the Lease's watermark
        **({"restart_nothing_changed": restarts} if restarts is not None else {}),
        "targets": {"le_30s": all_progressed <= 30.0,
                    **({"first_change_le_5s": min(progress) - killed <= 5.0} if workers == 2 else {})},
        **({"worker_profile": profiled} if profiled else {}),
    }


def _progressed(pclq: Tracked, since: float) -> float | None:
    """When the PodClique's mirrored status first showed its pod NotReady (readyReplicas 0) at or after `since`."""
    return pclq.first(lambda s: s["ready_replicas"] == 0, after=since)


def _wave(pclqs: dict[str, Tracked], pods: dict[str, Tracked],
          since: float) -> tuple[dict[str, float], dict[str, float]]:
    """For a wave of NotReady pods begun at `since`: when each PodClique progressed, when each pod was seen NotReady
    (0.0 where not seen)."""
    return ({name: _progressed(t, since) or 0.0 for name, t in pclqs.items()},
            {name: t.first(lambda s: not s["ready"], after=since) or 0.0 for name, t in pods.items()})


def _change_pods(cluster: BenchCluster, fleet: replicas.Fleet, failing: bool) -> float:
    """Fail (or restore) the readiness of every replica's pod, 8 requests at a time; returns when all were patched."""
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda p: fail_readiness(cluster.kube, fleet.namespace, p[2], failing), fleet.pods()))
    return time.time()


async def _floor_worker_alive(cluster: BenchCluster, observer: Observer, fleet: replicas.Fleet,
                              worker: WorkerProcess, pclqs: dict[str, Tracked], pods: dict[str, Tracked],
                              timeout: float) -> dict[str, Any]:
    """B5's floor: the same wave of NotReady pods, measured the same way, with the worker alive and warm. What the
    kill adds is the recovery's cost; the rest is what 1,000 changes at once cost this stack."""
    await asyncio.to_thread(_change_pods, cluster, fleet, False)
    await asyncio.to_thread(observer.wait, lambda: len(settled_pclqs(observer, fleet.namespace)) >= len(pclqs),
                            timeout, f"{len(pclqs)} replicas Ready again", 0.25)
    await wait_quiet(worker, timeout=timeout)
    worker_cpu, stack_cpu = procs.sample(worker.pid).cpu_seconds, cluster.stack_cpu()
    began = time.time()
    changing = asyncio.create_task(asyncio.to_thread(_change_pods, cluster, fleet, True))
    await asyncio.to_thread(observer.wait, lambda: all(_progressed(t, began) for t in pclqs.values()), timeout,
                            f"{len(pclqs)} replicas progressed with the worker alive", 0.25)
    worker_cpu = procs.sample(worker.pid).cpu_seconds - worker_cpu
    stack_cpu = cluster.stack_cpu_since(stack_cpu)
    changed = await changing
    progressed_at, not_ready_at = _wave(pclqs, pods, began)
    return {
        "all_progressed_s": round(max(progressed_at.values()) - began, 2),
        "progressed_s": summary([t - began for t in progressed_at.values()]),
        "pods_patched_s": round(changed - began, 2),
        "pods_seen_notready_s": summary([t - began for t in not_ready_at.values()]),
        "progressed_after_pod_notready_s": summary(_after_own_pod(progressed_at, not_ready_at)),
        "worker_cpu_s": round(worker_cpu, 1),
        "stack_cpu_s": stack_cpu,
    }


def _after_own_pod(progressed_at: dict[str, float], not_ready_at: dict[str, float]) -> list[float]:
    """Per replica, seconds from its pod seen NotReady to its PodClique's readyReplicas at 0 (each replica of the
    fleet has one pod, index 0 of its PodClique); replicas where either was not seen are left out."""
    pods = {pclq: names.pod_name(pclq, 0) for pclq in progressed_at}
    return [done - not_ready_at[pods[pclq]] for pclq, done in progressed_at.items()
            if done and not_ready_at.get(pods[pclq])]
