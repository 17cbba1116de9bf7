"""B3's second floor: the direct client's work, orchestrated by Temporal at the least cost one workflow per replica
can have (issue 17).

The first floor (bench/direct.py) has no Temporal at all, so it cannot tell what part of the gap between the product
and it is the architecture's (one durable workflow per replica on this Temporal server) and what part is the
product's own. Here every replica gets one workflow that runs one activity, and that activity is the direct client's
`materialise` for the replica (the same creates, nothing read back); the gates are removed by the same pod watch
process (bench/floor.py). Nothing else: no observation, no status writes, no signals, no timers. So per replica it
costs Temporal one workflow start, two workflow tasks and one activity, 11 history events.

With `local=True` the activity is a local one (run by the worker inside the workflow task, recorded as a marker):
one workflow task and 6 history events per replica, the least Temporal can be asked to record for one durable
workflow that does the replica's creates. That is the lower of the two and the floor to quote for the
architecture; the first is what a workflow whose creates are ordinary (retried, heartbeated) activities costs.

The floor's worker is a process of its own (`python -m bench.temporal_floor`), as the product's is, on FLOOR_THREADS
activity threads, the same as the direct floor's pool: in the bench process its workflow tasks competed with the
bench's own threads (at 5,000 replicas under load the SDK's deadlock detector fired on them), and its CPU could not
be told apart from the observer's. Its CPU is reported as the worker's.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from activities.kubeapi import JSON, Kube
from bench import direct, procs
from bench.sampling import history_lengths

POLLING = b"temporal floor: polling"

START_CONCURRENCY = 64  # workflow starts in flight at once, as a reconciler with a semaphore would


class FloorJob(BaseModel):
    pcs: dict[str, Any]  # the created PodCliqueSet, as the apiserver returned it
    replica: int
    backend: str
    local: bool = False  # the creates as a local activity


@workflow.defn(name="BenchFloorReplica")
class FloorReplicaWorkflow:
    @workflow.run
    async def run(self, job: FloorJob) -> int:
        if job.local:
            return await workflow.execute_local_activity(
                "bench_floor_materialise", job, start_to_close_timeout=timedelta(minutes=10), result_type=int)
        return await workflow.execute_activity(
            "bench_floor_materialise", job, start_to_close_timeout=timedelta(minutes=10), result_type=int)


class _Materialise:
    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @activity.defn(name="bench_floor_materialise")
    def materialise(self, job: FloorJob) -> int:
        return direct.materialise(self.kube, job.pcs, job.replica, job.backend)


async def run_all(client: Client, kubeconfig: Path, created: list[JSON], backend: str, threads: int,
                  released: Callable[[float], float], timeout: float, log: Path, *,
                  local: bool = False) -> dict[str, Any]:
    """Start the floor's worker process, then one floor workflow per replica of `created`, and wait until
    `released()` (a blocking predicate wait, run in a thread); returns the timings, the requests made, the history
    events per workflow and the worker process's CPU."""
    task_queue = f"bench-floor-{uuid.uuid4().hex[:6]}"
    jobs = {f"bench-floor/{obj['metadata']['namespace']}/{obj['metadata']['name']}/{i}":
            FloorJob(pcs=obj, replica=i, backend=backend, local=local)
            for obj in created for i in range(int(obj["spec"]["replicas"]))}
    worker = start_worker(client.service_client.config.target_host, kubeconfig, task_queue, threads, log)
    try:
        cpu_before = procs.sample(worker.pid).cpu_seconds
        gate = asyncio.Semaphore(START_CONCURRENCY)

        async def start(workflow_id: str, job: FloorJob) -> Any:
            async with gate:
                return await client.start_workflow(FloorReplicaWorkflow.run, job, id=workflow_id,
                                                   task_queue=task_queue)

        t0 = time.time()
        handles = await asyncio.gather(*(start(wid, job) for wid, job in jobs.items()))
        t_started = time.time()
        t_released = await asyncio.to_thread(released, timeout)
        # Each result() is a long poll on the workflow's history; thousands at once exceed the dev server's
        # concurrent-poller limit per namespace (B3 at 5,000 ended on it), so they share the starts' gate.

        async def result(handle: Any) -> int:
            async with gate:
                return int(await handle.result())

        requests = sum(await asyncio.gather(*(result(h) for h in handles)))
        t_done = time.time()
        worker_cpu = procs.sample(worker.pid).cpu_seconds - cpu_before
    finally:
        worker.terminate()
        try:
            worker.wait(10)
        except subprocess.TimeoutExpired:
            worker.kill()
    lengths = await history_lengths(client, jobs)
    return {"activity": "local" if local else "regular", "threads": threads, "start_concurrency": START_CONCURRENCY,
            "workflows": len(jobs),
            "t0": t0, "starts_s": round(t_started - t0, 2), "all_released_s": round(t_released - t0, 2),
            "all_workflows_done_s": round(t_done - t0, 2), "requests": requests, "worker_cpu_s": round(worker_cpu, 2),
            "history_events_per_replica": round(sum(lengths.values()) / max(1, len(lengths)), 1)}


def start_worker(temporal_address: str, kubeconfig: Path, task_queue: str, threads: int,
                 log: Path) -> subprocess.Popen[bytes]:
    """The floor's worker as a process of its own, once it polls (its output goes to `log`)."""
    return procs.start_module("bench.temporal_floor", ["--temporal", temporal_address, "--kubeconfig", str(kubeconfig),
                                                       "--task-queue", task_queue, "--threads", str(threads)],
                              log, POLLING, "the temporal floor's worker")


async def serve(temporal_address: str, kubeconfig: str, task_queue: str, threads: int) -> None:
    """The worker process: the floor's workflow and activity on `task_queue` until SIGTERM."""
    from activities.kubeapi import api_client

    client = await Client.connect(temporal_address, data_converter=pydantic_data_converter)
    kube = Kube(api_client(kubeconfig, pool_size=threads + 4))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    with ThreadPoolExecutor(threads) as pool:
        async with Worker(client, task_queue=task_queue, workflows=[FloorReplicaWorkflow],
                          activities=[_Materialise(kube).materialise], activity_executor=pool,
                          max_concurrent_activities=threads, workflow_runner=UnsandboxedWorkflowRunner()):
            print(POLLING.decode(), flush=True)
            await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="The worker of B3's Temporal floors (bench/temporal_floor.py).")
    parser.add_argument("--temporal", required=True, help="host:port of the Temporal frontend")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--task-queue", required=True)
    parser.add_argument("--threads", type=int, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.temporal, args.kubeconfig, args.task_queue, args.threads))


if __name__ == "__main__":
    main()
