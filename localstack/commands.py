"""`grove-temporal binaries` and `grove-temporal run`: provide the pinned binaries, run the local stack."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from localstack.processes import ManagedProcess
    from localstack.stack import LocalStack, StackOptions
    from worker.stacks import RunRecord

REPO = Path(__file__).resolve().parents[1]
DEFAULT_SAMPLE = REPO / "examples" / "gang-termination.yaml"
WORKER_DRAIN_SECONDS = 25.0  # longer than the worker's own graceful shutdown (20 s)


def binaries_command(
    no_download: Annotated[bool, typer.Option(help="Skip official releases; build from Go modules.")] = False,
) -> None:
    """Provide every pinned binary (cache, else official release, else Go build) and show where each came from."""
    from localstack import binaries

    started = time.monotonic()
    try:
        installed = binaries.ensure(log=binaries.stderr_log, allow_download=not no_download)
    except binaries.BinaryUnavailableError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    rows = [("NAME", "VERSION", "SECONDS", "OBTAINED", "PATH")]
    rows += [(i.name, i.version, f"{i.seconds:.1f}", i.obtained, str(i.path)) for i in installed]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for row in rows:
        typer.echo("  ".join(cell.ljust(widths[c]) if c < 4 else cell for c, cell in enumerate(row)))
    typer.echo(f"all binaries present in {binaries.bin_dir()} ({time.monotonic() - started:.1f}s)")


def stack_options(
    nodes: int = 3,
    node_cpu: str = "64",
    node_memory: str = "512Gi",
    node_gpus: int = 8,
    node_pods: int = 110,
    temporal_db: Path | None = None,
    run_dir: Path | None = None,
    gang_scheduling: bool = True,
) -> StackOptions:
    from localstack.kwok import NodeShape
    from localstack.stack import StackOptions

    shape = NodeShape(cpu=node_cpu, memory=node_memory, pods=node_pods, gpus=node_gpus)
    return StackOptions(nodes=nodes, node_shape=shape, temporal_db_file=temporal_db, run_dir=run_dir,
                        gang_scheduling=gang_scheduling)


def start_stack(options: StackOptions) -> LocalStack:
    """Start the local stack (reusable by commands that run more on top of it) and print how to reach it."""
    from localstack.stack import LocalStack

    stack = LocalStack(options).start()
    typer.echo(describe_stack(stack))
    return stack


def describe_stack(stack: LocalStack) -> str:
    return "\n".join(
        [
            f"Temporal UI:       {stack.temporal_ui_url}",
            f"Temporal address:  {stack.temporal_address}",
            f"Kubeconfig:        {stack.kubeconfig}",
            f"                   export KUBECONFIG={stack.kubeconfig}",
            f"Logs:              {stack.run_dir / 'logs'}",
            f"Temporal data:     {stack.options.temporal_db_file or 'in memory (lost if Temporal restarts)'}",
        ]
    )


def wait_until_interrupted(stack: LocalStack, worker: ManagedProcess | None = None) -> None:
    """Block until Ctrl-C, restarting any component (or the worker) that dies meanwhile, with a backoff."""
    from localstack.supervisor import Supervised, Supervisor

    def processes() -> dict[str, Supervised]:
        found: dict[str, Supervised] = {name: c.process for name, c in stack.components.items()}
        if worker is not None:
            found["worker"] = worker
        return found

    def restart(name: str) -> None:
        if name == "worker" and worker is not None:
            worker.start()
        else:
            stack.start_component(name)

    supervisor = Supervisor(processes, restart, lambda line: typer.echo(line, err=True))
    typer.echo("Running. Press Ctrl-C to stop.")
    while True:
        supervisor.tick()
        time.sleep(1)


def record_run(stack: LocalStack, http_port: int) -> RunRecord:
    """This run's own record (worker/stacks.py), so that commands find this stack, and never a dead one."""
    from datetime import UTC, datetime

    from worker.stacks import RunRecord, process_start_time

    record = RunRecord(
        pid=os.getpid(), started=process_start_time(os.getpid()),
        started_at=datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        temporal_address=stack.temporal_address, temporal_ui=stack.temporal_ui_url,
        kubeconfig=str(stack.kubeconfig), worker_metrics=f"http://127.0.0.1:{http_port}/metrics",
        run_dir=str(stack.run_dir),
    )
    record.write()
    return record


def start_worker(stack: LocalStack) -> tuple[ManagedProcess, RunRecord]:
    """CRDs in, then `grove-temporal worker` as a child process with its log beside the stack's."""
    from localstack.crds import apply_crds

    api = stack.kube_client()
    try:
        apply_crds(api)
    finally:
        api.close()
    from localstack.readiness import free_port

    http_port = free_port()
    argv = [sys.executable, "-m", "worker.cli", "worker", "--kubeconfig", str(stack.kubeconfig),
            "--temporal-address", stack.temporal_address, "--http-port", str(http_port)]
    process = stack.spawn("worker", argv, env={"PYTHONUNBUFFERED": "1"})
    record = record_run(stack, http_port)
    typer.echo(f"Worker:            pid {process.pid}, log {process.log_path}, "
               f"metrics http://127.0.0.1:{http_port}/metrics")
    return process, record


def apply_samples(stack: LocalStack, samples: list[Path]) -> None:
    """Apply each sample PCS and wait (up to a minute) until its replica workflows show a phase in Temporal."""
    if not samples:
        return
    import urllib.parse

    import yaml

    from activities.kubeapi import PODCLIQUESETS, Kube

    kube = Kube(stack.kube_client())
    names = []
    for path in samples:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            namespace = doc.setdefault("metadata", {}).setdefault("namespace", "default")
            if kube.get(PODCLIQUESETS, namespace, doc["metadata"]["name"]) is None:
                kube.create(PODCLIQUESETS, namespace, doc)
            names.append((namespace, doc["metadata"]["name"], int(doc.get("spec", {}).get("replicas", 1))))
            typer.echo(f"Applied:           PodCliqueSet {namespace}/{doc['metadata']['name']} from {path}")
    kube.api_client.close()
    from workflows.contract import replica_query

    query = urllib.parse.quote(replica_query(running_only=False))
    typer.echo(f"Replica workflows: {stack.temporal_ui_url}/namespaces/default/workflows?query={query}")
    asyncio.run(_show_replicas(stack.temporal_address, names))


async def _show_replicas(address: str, wanted: list[tuple[str, str, int]], timeout: float = 60.0) -> None:
    from worker import replica_client
    from worker.app import connect
    from worker.config import TemporalSettings

    client = await connect(TemporalSettings(address=address))
    deadline = time.monotonic() + timeout
    expected = sum(replicas for _, _, replicas in wanted)
    found: list[replica_client.ReplicaExecution] = []
    while time.monotonic() < deadline:
        found = [w for namespace, pcs, _ in wanted
                 for w in await replica_client.list_replicas(client, namespace=namespace, pcs=pcs) if w.phase != "Pending"]
        if len(found) >= expected:
            break
        await asyncio.sleep(1)
    for w in found:
        typer.echo(f"  {w.namespace}/{w.pcs} replica {w.replica}: {w.phase:<11} {w.workflow_id}")
    if len(found) < expected:
        typer.echo(f"warning: {len(found)} of {expected} replica workflows visible after {timeout:.0f}s; "
                   "see the worker log", err=True)
    typer.echo("Try:               grove-temporal status " + " ".join(sorted({p for _, p, _ in wanted}))
               + "    (in another terminal; it finds this stack)")


def run_command(
    nodes: Annotated[int, typer.Option(help="Number of fake (KWOK) nodes.")] = 3,
    node_cpu: Annotated[str, typer.Option(help="CPU capacity of each node.")] = "64",
    node_memory: Annotated[str, typer.Option(help="Memory capacity of each node.")] = "512Gi",
    node_gpus: Annotated[int, typer.Option(help="nvidia.com/gpu capacity of each node (0: none).")] = 8,
    node_pods: Annotated[int, typer.Option(help="Pod capacity of each node.")] = 110,
    temporal_db: Annotated[
        Path | None, typer.Option(help="SQLite file for Temporal (default: temporal.db in the run directory).")
    ] = None,
    temporal_in_memory: Annotated[
        bool, typer.Option("--temporal-in-memory",
                           help="Keep Temporal's data in memory: a restarted Temporal forgets every workflow.")
    ] = False,
    run_dir: Annotated[
        Path | None, typer.Option(help="Run directory (default: a new one under $GROVE_TEMPORAL_STATE_DIR).")
    ] = None,
    sample: Annotated[
        list[Path] | None,
        typer.Option(help="PodCliqueSet manifest(s) to apply once the worker runs (repeatable)."),
    ] = None,
    no_sample: Annotated[bool, typer.Option("--no-sample", help="Apply no sample PodCliqueSet.")] = False,
    worker: Annotated[bool, typer.Option(help="Run a grove-temporal worker against the stack.")] = True,
    gang_scheduling: Annotated[bool, typer.Option(
        help="Kubernetes' own gang scheduling: the PodGroup API (scheduling.k8s.io/v1alpha2) and the "
             "GenericWorkload/GangScheduling feature gates; the worker then uses the kube backend.")] = True,
) -> None:
    """Start the local stack and a worker, apply a sample PodCliqueSet, show it in the Temporal UI; Ctrl-C stops all.

    The stack: Temporal dev server (with its Web UI) + etcd, kube-apiserver, kube-scheduler, kube-controller-manager
    and KWOK fake GPU nodes. The sample defaults to examples/gang-termination.yaml (seed 002's configuration).
    """
    samples = [] if no_sample or not worker else (sample or [DEFAULT_SAMPLE])
    for path in samples:
        if not path.is_file():
            raise typer.BadParameter(f"no such file: {path}", param_hint="'--sample'")
    from localstack.binaries import BinaryUnavailableError
    from localstack.processes import StackStartError

    if temporal_in_memory and temporal_db is not None:
        raise typer.BadParameter("--temporal-db and --temporal-in-memory exclude each other",
                                 param_hint="'--temporal-in-memory'")
    if not temporal_in_memory and temporal_db is None:
        # On disk by default: a Temporal that dies and is started again keeps every workflow, timer and signal.
        from localstack.rundirs import new_run_dir

        run_dir = run_dir or new_run_dir()
        temporal_db = run_dir / "temporal.db"
    # A shell that starts us in the background sets SIGINT to "ignore"; Ctrl-C / kill -INT must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    options = stack_options(nodes, node_cpu, node_memory, node_gpus, node_pods, temporal_db, run_dir,
                            gang_scheduling)
    try:
        stack = start_stack(options)  # stops whatever it started if it fails or is interrupted
    except (BinaryUnavailableError, StackStartError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    except KeyboardInterrupt:
        typer.echo("\ninterrupted while starting; stopped", err=True)
        raise typer.Exit(130) from None
    worker_process = None
    record = None
    try:
        if worker:
            worker_process, record = start_worker(stack)
            apply_samples(stack, samples)
        wait_until_interrupted(stack, worker_process)
    except KeyboardInterrupt:
        typer.echo("\nstopping …")
    finally:
        if record is not None:
            record.remove()  # only this run's record: other runs on the machine keep theirs
        if worker_process is not None:
            worker_process.stop(WORKER_DRAIN_SECONDS)
        stack.stop()
        typer.echo("stack stopped")


def register(app: typer.Typer) -> None:
    app.command("binaries")(binaries_command)
    app.command("run")(run_command)
