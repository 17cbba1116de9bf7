"""`grove-temporal binaries` and `grove-temporal run`: provide the pinned binaries, run the local stack."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from worker.localstack.stack import LocalStack, StackOptions


def binaries_command(
    no_download: Annotated[bool, typer.Option(help="Skip official releases; build from Go modules.")] = False,
) -> None:
    """Provide every pinned binary (cache, else official release, else Go build) and show where each came from."""
    from worker.localstack import binaries

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
) -> StackOptions:
    from worker.localstack.kwok import NodeShape
    from worker.localstack.stack import StackOptions

    shape = NodeShape(cpu=node_cpu, memory=node_memory, pods=node_pods, gpus=node_gpus)
    return StackOptions(nodes=nodes, node_shape=shape, temporal_db_file=temporal_db, run_dir=run_dir)


def start_stack(options: StackOptions) -> LocalStack:
    """Start the local stack (reusable by commands that run more on top of it) and print how to reach it."""
    from worker.localstack.stack import LocalStack

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
        ]
    )


def wait_until_interrupted(stack: LocalStack) -> None:
    """Block until Ctrl-C, reporting any component that dies meanwhile."""
    reported: set[str] = set()
    typer.echo("Running. Press Ctrl-C to stop.")
    while True:
        for name, component in stack.components.items():
            if name not in reported and not component.process.running():
                reported.add(name)
                typer.echo(f"warning: {component.process.exit_description()}", err=True)
        time.sleep(2)


def run_command(
    nodes: Annotated[int, typer.Option(help="Number of fake (KWOK) nodes.")] = 3,
    node_cpu: Annotated[str, typer.Option(help="CPU capacity of each node.")] = "64",
    node_memory: Annotated[str, typer.Option(help="Memory capacity of each node.")] = "512Gi",
    node_gpus: Annotated[int, typer.Option(help="nvidia.com/gpu capacity of each node (0: none).")] = 8,
    node_pods: Annotated[int, typer.Option(help="Pod capacity of each node.")] = 110,
    temporal_db: Annotated[
        Path | None, typer.Option(help="SQLite file for Temporal (default: in memory).")
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option(help="Run directory (default: a new one under $GROVE_TEMPORAL_STATE_DIR).")
    ] = None,
) -> None:
    """Start the local stack (Temporal dev server + Kubernetes control plane + KWOK) and keep it up until Ctrl-C."""
    from worker.localstack.binaries import BinaryUnavailableError
    from worker.localstack.processes import StackStartError

    # A shell that starts us in the background sets SIGINT to "ignore"; Ctrl-C / kill -INT must still stop us.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    options = stack_options(nodes, node_cpu, node_memory, node_gpus, node_pods, temporal_db, run_dir)
    try:
        stack = start_stack(options)  # stops whatever it started if it fails or is interrupted
    except (BinaryUnavailableError, StackStartError) as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    except KeyboardInterrupt:
        typer.echo("\ninterrupted while starting; stopped", err=True)
        raise typer.Exit(130) from None
    try:
        wait_until_interrupted(stack)
    except KeyboardInterrupt:
        typer.echo("\nstopping …")
    finally:
        stack.stop()
        typer.echo("stack stopped")


def register(app: typer.Typer) -> None:
    app.command("binaries")(binaries_command)
    app.command("run")(run_command)
