"""The worker process: workflows and activities on one task queue, the reconciler kept running, and the watcher
under leader election. All wiring lives here (samples-python style); every other module is one concern."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from temporalio.client import Client, TLSConfig, WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.runtime import Runtime
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import (
    FixedSizeSlotSupplier,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkerTuner,
    WorkflowRunner,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities.backend import Scheduling, detect
from activities.fanout import FANOUT_POOLS, FANOUT_THREADS
from activities.kubeapi import LEASES, Kube, KubeError, api_client
from activities.pacing import FLOOR, CreationPace
from activities.reconcile import ReconcileActivities
from activities.replica import ReplicaActivities, drift_in_cache
from activities.rollout import RolloutActivities
from activities.scaling import StartupActivities
from activities.watch_cache import WatchCache
from worker import watermark
from worker.config import TemporalSettings, WorkerSettings
from worker.doctor import StuckMonitor
from worker.leader import LeaseElector
from worker.pcs_status import PcsStatusWriter, rollout_waker
from worker.slots import StickyFirstSlots
from worker.stuck_deletions import StuckDeletionSweeper
from worker.telemetry import SdkMetrics, client_interceptors, configure_tracing, sdk_metrics_runtime
from worker.watcher import Watcher
from workflows.contract import reconciler_workflow_id
from workflows.messages import ReconcilerInput, ReplicaRef
from workflows.patches import NEWEST_INPUT_BASELINE
from workflows.reconciler import ReconcilerWorkflow
from workflows.replica import ReplicaWorkflow
from workflows.rollout import RolloutWorkflow

log = logging.getLogger(__name__)
T = TypeVar("T")

WORKFLOWS = [ReplicaWorkflow, ReconcilerWorkflow, RolloutWorkflow]


async def connect(settings: TemporalSettings, *, runtime: Runtime | None = None) -> Client:
    tls: TLSConfig | bool | None = settings.tls
    if settings.tls is not False and (settings.tls_ca_path or settings.tls_cert_path or settings.tls_server_name):
        tls = TLSConfig(
            server_root_ca_cert=_read(settings.tls_ca_path),
            client_cert=_read(settings.tls_cert_path),
            client_private_key=_read(settings.tls_key_path),
            domain=settings.tls_server_name,
        )
    return await Client.connect(
        settings.address,
        namespace=settings.namespace,
        data_converter=pydantic_data_converter,
        api_key=settings.api_key.get_secret_value() if settings.api_key else None,
        tls=tls,
        interceptors=client_interceptors(),
        runtime=runtime,
    )


TEMPORAL_RETRY_MAX_SECONDS = 30.0


async def _until_reachable(what: str, call: Callable[[], Awaitable[T]], stop: asyncio.Event) -> T | None:
    """Call until Temporal answers, backing off 1 s → 30 s; None once `stop` is set.

    A worker that starts while Temporal is restarting (or not up yet) waits for it instead of exiting: exiting
    would leave its replicas without a worker until something restarts the process (CrashLoopBackOff in a
    cluster, seen as an exit with status 1 in the seeded fault runs)."""
    delay = 1.0
    while not stop.is_set():
        try:
            result: T = await call()
            return result
        except (RuntimeError, RPCError) as err:  # the SDK raises RuntimeError for a failed connect
            log.warning("%s: Temporal not reachable (%s); retrying in %.0fs", what, str(err).splitlines()[0][:300],
                        delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        delay = min(delay * 2, TEMPORAL_RETRY_MAX_SECONDS)
    return None


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as handle:
        return handle.read()


def activities_for(kube: Kube, client: Client, scheduling: Scheduling | None = None,
                   cache: WatchCache | None = None, *, count_pcs: bool = True,
                   replica_task_timeout: timedelta | None = None,
                   pace: CreationPace | None = None) -> list[Callable[..., Any]]:
    replica = ReplicaActivities(kube, scheduling, cache, count_pcs=count_pcs, pace=pace)
    reconcile = ReconcileActivities(kube, client, replica_task_timeout=replica_task_timeout)
    rollout = RolloutActivities(kube, cache)
    return [
        replica.observe_replica,
        replica.observe_replica_cached,
        replica.ensure_replica,
        replica.ensure_replica_cached,
        replica.ensure_replica_releasing,
        replica.release_gates,
        replica.terminate_gang,
        replica.delete_replica,
        replica.mirror_status,
        replica.record_event,
        reconcile.sync_pcs_batch,
        reconcile.sweep_replica_workflows,
        StartupActivities(kube, cache).release_startup,
        rollout.observe_rollout,
        rollout.observe_rollout_cached,
        rollout.recreate_for_update,
        rollout.mirror_rollout_status,
        rollout.record_rollout_event,
    ]


@dataclass
class RunningWorker:
    settings: WorkerSettings
    client: Client
    kube: Kube
    worker: Worker
    elector: LeaseElector | None
    doctor: StuckMonitor | None = None
    scheduling: Scheduling = Scheduling()
    cache: WatchCache | None = None

    @property
    def is_leader(self) -> bool:
        return self.elector is not None and self.elector.is_leader


async def detect_scheduling(kube: Kube, requested: str, stop: asyncio.Event) -> Scheduling | None:
    """The gang scheduler backend (activities/backend.detect), asking the cluster until it answers; None once `stop`
    is set. A backend the cluster cannot serve raises BackendUnavailable (the worker stops with its message)."""
    delay = 1.0
    while not stop.is_set():
        try:
            scheduling = await asyncio.to_thread(detect, kube, requested)
            log.info("scheduler backend: %s", scheduling.describe())
            return scheduling
        except KubeError as err:
            if err.invalid or err.forbidden:
                raise
            log.warning("scheduler backend: Kubernetes not reachable (%s); retrying in %.0fs", err, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=delay)
        delay = min(delay * 2, TEMPORAL_RETRY_MAX_SECONDS)
    return None


async def ensure_reconciler(client: Client, settings: WorkerSettings) -> None:
    await client.start_workflow(
        ReconcilerWorkflow.run,
        ReconcilerInput(
            namespace=settings.watch_namespace,
            task_queue=settings.task_queue,
            full_pass_every=settings.reconcile_every,
            replica_safety_resync=settings.replica_safety_resync,
            rollout_idle_resync=settings.rollout_idle_resync,
        ),
        id=reconciler_workflow_id(settings.watch_namespace),
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        static_summary="grove-temporal reconciler: one replica workflow per wanted PodCliqueSet replica",
    )


async def keep_reconciler(client: Client, settings: WorkerSettings, stop: asyncio.Event) -> None:
    """Start the reconciler again whenever it is found not running (terminated from the UI, or a Temporal that lost
    its data): it is what starts replica workflows, and waiting for a worker restart would leave new PodCliqueSets
    without workflows. Every worker checks; "use existing" makes a race between them harmless. When Temporal cannot
    be asked, nothing is done."""
    handle = client.get_workflow_handle(reconciler_workflow_id(settings.watch_namespace))
    while True:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), settings.reconciler_check.total_seconds())
        if stop.is_set():
            return
        try:
            status: WorkflowExecutionStatus | None = (await handle.describe()).status
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                log.debug("reconciler check skipped: %s", exc)
                continue
            status = None
        if status == WorkflowExecutionStatus.RUNNING:
            continue
        log.warning("reconciler workflow %s is %s; starting it again", handle.id,
                    status.name.lower() if status else "gone")
        try:
            await ensure_reconciler(client, settings)
        except RPCError as exc:
            log.warning("starting the reconciler again failed (%s); next check in %.0fs", exc,
                        settings.reconciler_check.total_seconds())


async def _start_cache(cache: WatchCache) -> None:
    await asyncio.to_thread(cache.start)


async def _lead(watcher: Watcher, pcs_status: PcsStatusWriter, deletions: StuckDeletionSweeper, client: Client,
                settings: WorkerSettings, elector: LeaseElector) -> None:
    """What the leader of a scope does: watch, keep the PCSes' status figures and the fleet gauges (one writer for
    the whole scope), and finish PodClique deletions the garbage collector left stuck. Taken from a dead worker of
    this host, it first sends that worker's workflows back to the shared task queue (worker/stickiness.py)."""
    from worker.fleet import keep_fleet_gauges
    from worker.stickiness import release_dead_workers_workflows

    namespace = settings.watch_namespace
    if elector.taken_from_dead:
        await release_dead_workers_workflows(client, settings.task_queue, settings.identity, elector.taken_from_dead)
    await asyncio.gather(watcher.run(), pcs_status.run(), deletions.run(), keep_fleet_gauges(client, namespace))


async def run_worker(settings: WorkerSettings, stop: asyncio.Event, *, client: Client | None = None) -> None:
    """Run until `stop` is set, then drain: in-flight activities get `graceful_shutdown` to finish."""
    tracer_provider = configure_tracing()
    sdk_metrics = sdk_metrics_runtime() if client is None and settings.http_port is not None else None
    started: list[RunningWorker] = []
    endpoint: asyncio.Task[None] | None = None
    if settings.http_port is not None:
        from worker.http import serve

        # Up before Temporal is reached: a worker waiting for Temporal is alive, just not ready.
        endpoint = asyncio.create_task(
            serve(lambda: started[-1] if started else None, sdk_metrics, settings.http_port, stop))
    try:
        await _serve_task_queue(settings, stop, client, sdk_metrics, started)
    finally:
        stop.set()
        if endpoint is not None:
            endpoint.cancel()
            await asyncio.gather(endpoint, return_exceptions=True)
        if tracer_provider is not None:
            tracer_provider.shutdown()  # flush spans still batched


def workflow_runner(sandboxed: bool) -> WorkflowRunner:
    """Temporal's sandbox, or none (worker/config.py: workflow_sandbox says what it costs and what holds determinism
    without it); the tests' Replayers take theirs from here too."""
    return SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner()


def creation_pace(settings: WorkerSettings) -> CreationPace | None:
    """The worker's pace of materialisations (activities/pacing.py): at most one per workflow-task slot, each led
    toward 40% of the replicas' workflow task timeout (half the 80% at which the SDK heartbeats a task)."""
    if not (settings.creation_pacing and settings.sticky_first_slots):
        return None
    return CreationPace(settings.max_concurrent_workflow_tasks,
                        0.4 * settings.replica_task_timeout.total_seconds(),
                        floor=min(FLOOR, settings.max_concurrent_workflow_tasks))


def slot_tuner(settings: WorkerSettings, pace: CreationPace | None = None) -> WorkerTuner:
    """The worker's slots: workflow tasks sticky queue first (worker/slots.py), the shared queue held while `pace`
    is full, activities and local activities fixed. Nexus is not served; its count is the SDK's default."""
    workflow = (StickyFirstSlots(settings.max_concurrent_workflow_tasks, pace.full if pace else None)
                if settings.sticky_first_slots else FixedSizeSlotSupplier(settings.max_concurrent_workflow_tasks))
    return WorkerTuner.create_composite(
        workflow_supplier=workflow,
        activity_supplier=FixedSizeSlotSupplier(settings.activity_threads),
        local_activity_supplier=FixedSizeSlotSupplier(settings.local_activity_slots),
        nexus_supplier=FixedSizeSlotSupplier(100))


async def _serve_task_queue(settings: WorkerSettings, stop: asyncio.Event, client: Client | None,
                            sdk_metrics: SdkMetrics | None, started: list[RunningWorker]) -> None:
    if client is None:
        runtime = sdk_metrics.runtime if sdk_metrics else None
        client = await _until_reachable(f"connect to {settings.temporal.address}",
                                        lambda: connect(settings.temporal, runtime=runtime), stop)
        if client is None:
            return  # stopped before Temporal was ever reached
    # Local activities get threads of their own beside the scheduled ones (at most `local_activity_slots` run at
    # once, the SDK holds the rest back): with one shared cap, 64 materialisations of new replicas (each creating its
    # objects one after another) took every thread, and the cached reads, gate releases and status writes of the
    # replicas created first waited seconds for one inside their workflow tasks (B3, 17-pod replicas: tasks of 5-8 s,
    # a third more requests and events in one run of three).
    threads = settings.activity_threads + settings.local_activity_slots
    kube = Kube(api_client(settings.kubeconfig, pool_size=threads + FANOUT_POOLS * FANOUT_THREADS + 8))
    scheduling = await detect_scheduling(kube, settings.scheduler_backend, stop)
    if scheduling is None:
        return  # stopped before Kubernetes answered
    # One list+watch per kind for this worker: routine observation reads it, and so does the watcher, leader or not.
    cache = WatchCache(kube, settings.watch_namespace, resync_seconds=settings.watch_resync.total_seconds()) \
        if settings.watch_cache else None
    pace = creation_pace(settings)
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="activity") as executor:
        worker = Worker(
            client,
            task_queue=settings.task_queue,
            workflows=WORKFLOWS,
            workflow_runner=workflow_runner(settings.workflow_sandbox),
            activities=activities_for(kube, client, scheduling, cache, count_pcs=not settings.watcher,
                                      replica_task_timeout=settings.replica_task_timeout, pace=pace),
            sticky_queue_schedule_to_start_timeout=settings.sticky_timeout,
            activity_executor=executor,
            tuner=slot_tuner(settings, pace),
            nonsticky_to_sticky_poll_ratio=settings.nonsticky_poll_ratio,
            max_cached_workflows=settings.max_cached_workflows,
            graceful_shutdown_timeout=settings.graceful_shutdown,
            identity=settings.identity,
        )
        elector = None
        background: list[asyncio.Task[None]] = []
        if settings.watcher:
            watcher = Watcher(kube, client, namespace=settings.watch_namespace,
                              nudge_coalesce_seconds=settings.nudge_coalesce.total_seconds(),
                              nudge_status_window_seconds=settings.nudge_status_window.total_seconds(),
                              resync_seconds=settings.watch_resync.total_seconds(), cache=cache,
                              first_list_drift=lambda key: drift_in_cache(watcher.cache, scheduling, ReplicaRef(
                                  namespace=key.namespace, pcs=key.pcs, pcs_uid=key.pcs_uid, replica=key.replica)),
                              last_watermark=lambda: watermark.read(kube.get(LEASES, settings.lease_namespace,
                                                                             settings.lease_name)))
            # hears the cache before it starts: no event missed
            pcs_status = PcsStatusWriter(kube, watcher.cache, wake_rollouts=rollout_waker(client))
            deletions = StuckDeletionSweeper(kube, watcher.cache)
            background.append(asyncio.create_task(watcher.follow()))  # warm before it leads: a fast hand-over
            elector = LeaseElector(kube, namespace=settings.lease_namespace, name=settings.lease_name,
                                   identity=settings.identity, lease_seconds=settings.lease_seconds,
                                   renew_every=settings.lease_renew_every, retry_every=settings.lease_retry_every,
                                   annotations=watcher.lease_annotations)
            leading = elector  # as typed here: the lambda below would see `elector` as possibly None
            background.append(asyncio.create_task(elector.run(
                lambda: _lead(watcher, pcs_status, deletions, client, settings, leading), stop,
                unfit=watcher.unfit)))
        elif cache is not None:
            background.append(asyncio.create_task(_start_cache(cache)))
        # One worker looks for stuck replica workflows: the watcher's leader (any worker without a watcher).
        doctor = StuckMonitor(client, namespace=settings.watch_namespace, min_attempts=settings.stuck_attempts,
                              sweep_batch=settings.stuck_sweep_batch,
                              leading=(lambda: elector.is_leader) if elector is not None else (lambda: True))
        started.append(RunningWorker(settings, client, kube, worker, elector, doctor, scheduling, cache))
        worker_task = asyncio.create_task(worker.run())
        try:
            await _until_reachable("start the reconciler", lambda: ensure_reconciler(client, settings), stop)
            log.info("worker %s running on task queue %s (workflows %s; begins replica runs under patch baseline %d)",
                     settings.identity, settings.task_queue,
                     "in Temporal's sandbox" if settings.workflow_sandbox else "unsandboxed", NEWEST_INPUT_BASELINE)
            background.append(asyncio.create_task(keep_reconciler(client, settings, stop)))
            background.append(asyncio.create_task(doctor.run(settings.stuck_check.total_seconds(), stop)))
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait([worker_task, stopped], return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
        finally:
            stop.set()
            if not worker_task.done():
                await worker.shutdown()
            await asyncio.gather(worker_task, return_exceptions=True)
            for task in background:
                task.cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if cache is not None:
                cache.stop()
            kube.api_client.close()
