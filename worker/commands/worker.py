"""`grove-temporal worker`: run workflows, activities and the watcher against an existing cluster and Temporal."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    app.command("worker")(worker)


def worker(
    kubeconfig: Annotated[str | None, typer.Option(help="kubeconfig file (default: $KUBECONFIG, in-cluster)")] = None,
    temporal_address: Annotated[str | None, typer.Option(help="host:port (default: $TEMPORAL_ADDRESS)")] = None,
    temporal_namespace: Annotated[str | None, typer.Option(help="default: $TEMPORAL_NAMESPACE or 'default'")] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="drive PodCliqueSets of this namespace only")
    ] = None,
    task_queue: Annotated[str | None, typer.Option(help="default: grove-temporal")] = None,
    http_port: Annotated[int | None, typer.Option(help="serve /metrics, /healthz, /readyz here")] = None,
    watcher: Annotated[bool, typer.Option(help="run the watcher (leader-elected among workers)")] = True,
    watch_cache: Annotated[bool, typer.Option(help="observe replicas from this worker's watch cache (off: every "
                                                   "observation lists from the apiserver)")] = True,
    workflow_sandbox: Annotated[
        bool | None, typer.Option(help="run workflows in Temporal's sandbox: runtime determinism checks, slower "
                                       "starts and replays (default: $GROVE_TEMPORAL_WORKFLOW_SANDBOX, else off)")
    ] = None,
    reconciler_check_seconds: Annotated[
        float, typer.Option(min=1, help="how often to check that the reconciler workflow runs (restart it if not)")
    ] = 60,
    stuck_check_seconds: Annotated[
        float, typer.Option(min=1, help="how often to look for replica workflows whose workflow tasks keep failing")
    ] = 60,
    rollout_resync_seconds: Annotated[
        float, typer.Option(min=1, help="how often an idle rollout workflow re-reads its PodCliqueSet (from the "
                                        "watch cache), for the rollout workflows the reconciler starts")
    ] = 600,
    replica_resync_seconds: Annotated[
        float, typer.Option(min=1, help="how often a replica workflow looks at its replica again with no change "
                                        "heard (its safety resync, from the watch cache), for the replica "
                                        "workflows the reconciler starts")
    ] = 6 * 3600,
    stuck_attempts: Annotated[
        int, typer.Option(min=1, help="failed attempts of one workflow task that make a replica workflow stuck")
    ] = 3,
    stuck_sweep_batch: Annotated[
        int, typer.Option(min=1, help="replica workflows described per check where Temporal's visibility cannot "
                                      "name those with failing tasks (servers before 1.30, the dev server)")
    ] = 100,
    scheduler_backend: Annotated[
        str | None, typer.Option(help="gang scheduler: auto (kube where the cluster serves native PodGroups, else "
                                      "none), kube, kai or none; default $GROVE_TEMPORAL_SCHEDULER_BACKEND or auto")
    ] = None,
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
    log_format: Annotated[str, typer.Option(help="json or text")] = "text",
) -> None:
    """Run a worker: replica workflows, the reconciler, their activities and the watcher."""
    import asyncio
    import signal
    from datetime import timedelta

    from activities.backend import REQUESTS, BackendUnavailable
    from worker.app import run_worker
    from worker.config import WorkerSettings
    from worker.logs import configure_logging

    configure_logging(log_level, log_format)
    try:
        settings = WorkerSettings()
    except ValueError as err:  # a malformed GROVE_TEMPORAL_* variable: one line naming it, nothing started
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from err
    updates: dict[str, object] = {"watcher": watcher, "watch_cache": watch_cache, "reconciler_check": timedelta(seconds=reconciler_check_seconds),
                                  "stuck_check": timedelta(seconds=stuck_check_seconds),
                                  "stuck_attempts": stuck_attempts, "stuck_sweep_batch": stuck_sweep_batch,
                                  "rollout_idle_resync": timedelta(seconds=rollout_resync_seconds),
                                  "replica_safety_resync": timedelta(seconds=replica_resync_seconds)}
    if kubeconfig:
        updates["kubeconfig"] = kubeconfig
    if namespace:
        updates["watch_namespace"] = namespace
    if task_queue:
        updates["task_queue"] = task_queue
    if http_port is not None:
        updates["http_port"] = http_port
    if workflow_sandbox is not None:
        updates["workflow_sandbox"] = workflow_sandbox
    if scheduler_backend is not None:
        updates["scheduler_backend"] = scheduler_backend
    backend = settings.scheduler_backend if scheduler_backend is None else scheduler_backend
    if backend not in REQUESTS:
        raise typer.BadParameter(f"must be {', '.join(REQUESTS)}, got {backend!r}",
                                 param_hint="--scheduler-backend / GROVE_TEMPORAL_SCHEDULER_BACKEND")
    temporal = settings.temporal.model_copy(
        update={k: v for k, v in {"address": temporal_address, "namespace": temporal_namespace}.items() if v}
    )
    settings = settings.model_copy(update={**updates, "temporal": temporal})

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(settings, stop)

    try:
        asyncio.run(main())
    except BackendUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from err
