"""`grove-temporal stack-bench`: the local stack's own figures (warm start/stop, idle memory, node-loss time)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from localstack.stack import LocalStack


def stack_bench_command(
    rounds: Annotated[int, typer.Option(help="How many times to start and stop the stack.")] = 3,
    idle_seconds: Annotated[float, typer.Option(help="Idle time before measuring memory.")] = 30.0,
    lost_node: Annotated[
        bool, typer.Option(help="Also time how long a lost node's pods take to go.")
    ] = False,
) -> None:
    """Print the local stack's figures: warm start and stop time, idle memory (RSS), optionally node-loss time."""
    from localstack.stack import LocalStack, StackOptions

    for round_ in range(1, rounds + 1):
        stack = LocalStack(StackOptions(nodes=3), log=lambda _: None)
        began = time.monotonic()
        stack.start()
        startup = time.monotonic() - began
        try:
            typer.echo(f"round {round_}: {stack.describe_timings()}")
            if round_ == rounds:
                time.sleep(idle_seconds)
                rss = stack.rss_bytes()
                parts = ", ".join(f"{name} {size / 2**20:.0f}" for name, size in rss.items())
                typer.echo(
                    f"idle RSS after {idle_seconds:.0f}s: {sum(rss.values()) / 2**20:.0f} MiB ({parts} MiB)"
                )
                if lost_node:
                    typer.echo(f"pods of a lost node gone after {time_node_loss(stack):.1f}s")
        finally:
            began = time.monotonic()
            stack.stop()
            typer.echo(f"round {round_}: start {startup:.1f}s, stop {time.monotonic() - began:.1f}s")


def time_node_loss(stack: LocalStack, pods: int = 3) -> float:
    """Seconds from `stack.lose_node` until every pod that ran on the lost node is gone from the API."""
    from kubernetes.client import CoreV1Api, V1Container, V1ObjectMeta, V1Pod, V1PodSpec
    from kubernetes.client.exceptions import ApiException

    selector = {"grove-temporal.io/bench": f"lost-node-{time.monotonic_ns()}"}
    (node,) = stack.add_nodes(1, labels=selector)
    with stack.kube_client() as api:
        core = CoreV1Api(api)
        names = [f"lost-node-bench-{selector['grove-temporal.io/bench'][-8:]}-{i}" for i in range(pods)]
        for name in names:
            container = V1Container(name="main", image="registry.k8s.io/pause:3.10")
            spec = V1PodSpec(node_selector=selector, containers=[container])
            core.create_namespaced_pod("default", V1Pod(metadata=V1ObjectMeta(name=name), spec=spec))

        def phase(name: str) -> str | None:
            try:
                status = core.read_namespaced_pod(name, "default").status
            except ApiException as error:
                if error.status == 404:
                    return None
                raise
            return status.phase if status else "Pending"

        while any(phase(n) != "Running" for n in names):
            time.sleep(0.1)
        began = time.monotonic()
        stack.lose_node(node)
        while any(phase(n) is not None for n in names):
            time.sleep(0.2)
        return time.monotonic() - began


def register(app: typer.Typer) -> None:
    app.command("stack-bench")(stack_bench_command)
