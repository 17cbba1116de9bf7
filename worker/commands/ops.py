"""Operator commands: status, list, pause, resume, terminate, history. Tables for people, `-o json|yaml` for
scripts (one schema, worker/output.py). The namespace is chosen as kubectl chooses it: `-n`, else the kubeconfig's
current context, else `default`; `-A` means every namespace (status, list).

Exit codes: 0 done/accepted, 1 rejected or not found (the message names the argument), 2 usage error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

T = TypeVar("T")

Namespace = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="namespace of the PodCliqueSet; default: the kubeconfig context's"),
]
AllNamespaces = Annotated[bool, typer.Option("--all-namespaces", "-A", help="every namespace")]
Output = Annotated[str, typer.Option("--output", "-o", help="table, json or yaml")]
Address = Annotated[
    str | None,
    typer.Option("--temporal-address", help="default: $TEMPORAL_ADDRESS, the running `grove-temporal run`, 127.0.0.1:7233"),
]
TemporalNamespace = Annotated[str, typer.Option("--temporal-namespace", envvar="TEMPORAL_NAMESPACE")]


def register(app: typer.Typer) -> None:
    app.command("status")(status)
    app.command("list")(list_command)
    app.command("pause")(pause)
    app.command("resume")(resume)
    app.command("terminate")(terminate)
    app.command("history")(history)


def _check_output(output: str) -> None:
    if output not in ("table", "json", "yaml"):
        raise typer.BadParameter(f"must be 'table', 'json' or 'yaml', not {output!r}", param_hint="'--output'")


def _namespace(namespace: str | None) -> str:
    from worker.kubecontext import context_namespace

    return namespace or context_namespace()


def _scope(namespace: str | None, all_namespaces: bool) -> str | None:
    """The namespace to look in; None for every namespace."""
    if all_namespaces and namespace:
        raise typer.BadParameter("-n and -A exclude each other", param_hint="'--all-namespaces'")
    return None if all_namespaces else _namespace(namespace)


def connect_failure(error: BaseException) -> str:
    """Why a connection failed, in words, without the Rust transport's debug text."""
    text = str(error)
    for marker, words in (("Connection refused", "connection refused"), ("timed out", "timed out"),
                          ("dns error", "unknown host"), ("Name or service not known", "unknown host"),
                          ("certificate", "TLS certificate rejected"), ("InvalidUri", "not a host:port address")):
        if marker.lower() in text.lower():
            return words
    return text.split(":")[0] if text else type(error).__name__


def _run(address: str | None, temporal_namespace: str, body: Callable[[Any], Awaitable[T]]) -> T:
    from worker.app import connect
    from worker.config import TemporalSettings
    from worker.replica_client import OperatorError, default_temporal_address

    async def main() -> T:
        settings = TemporalSettings(address=address or default_temporal_address(), namespace=temporal_namespace)
        try:
            client = await connect(settings)
        except Exception as exc:
            raise OperatorError(f"cannot reach Temporal at {settings.address} ({connect_failure(exc)}); is "
                                "`grove-temporal run` running? Otherwise set --temporal-address or "
                                "TEMPORAL_ADDRESS") from exc
        return await body(client)

    try:
        return asyncio.run(main())
    except OperatorError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


def _emit(data: Any, output: str) -> None:
    from worker.output import render

    typer.echo(render(data, output).rstrip("\n"))


def status(
    pcs: Annotated[str | None, typer.Argument(help="PodCliqueSet name; all in the namespace when omitted")] = None,
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    replica: Annotated[int | None, typer.Option("--replica", "-r", min=0)] = None,
    output: Output = "table",
    watch: Annotated[bool, typer.Option("--watch", "-w", help="keep showing changes until Ctrl-C")] = False,
    interval: Annotated[float, typer.Option(min=0.2, help="seconds between reads with --watch")] = 2.0,
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Per replica: phase, paused, PodClique availability, pending terminationDelay deadlines."""
    _check_output(output)
    scope = _scope(namespace, all_namespaces)
    if pcs is not None and scope is None:
        raise typer.BadParameter("a PodCliqueSet name needs one namespace, not -A", param_hint="'--all-namespaces'")
    from worker import render, replica_client
    from worker.output import wire

    async def read(client: Any) -> list[Any]:
        if pcs is None:
            workflows = await replica_client.list_replicas(client, namespace=scope)
            if replica is not None:
                workflows = [w for w in workflows if w.replica == replica]
        else:
            assert scope is not None
            workflows = await replica_client.find_replicas(client, scope, pcs, replica)
        return list(await asyncio.gather(*(replica_client.replica_status(client, w.workflow_id) for w in workflows)))

    def show(statuses: list[Any], compact: bool) -> None:
        from worker.placement import placement_reasons

        if output == "table":
            render.statuses(statuses, placement_reasons)
        else:
            from worker.output import render as as_text
            from worker.output import with_placement

            typer.echo(as_text(with_placement(statuses, placement_reasons), output, compact=compact).rstrip("\n"))

    async def body(client: Any) -> None:
        statuses = await read(client)
        show(statuses, compact=watch)
        shown = _changes(statuses, wire)
        while watch:
            await asyncio.sleep(interval)
            statuses = await read(client)
            changed = _changes(statuses, wire)
            if changed != shown:
                if output == "table":
                    typer.echo("")
                show(statuses, compact=True)
                shown = changed

    try:
        _run(temporal_address, temporal_namespace, body)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def _changes(statuses: list[Any], wire: Callable[[Any], Any]) -> str:
    """What --watch compares: everything but the time of the observation."""
    data = wire(statuses)
    for item in data:
        item.pop("observedAt", None)
    return json.dumps(data, sort_keys=True)


def list_command(
    namespace: Namespace = None,
    all_namespaces: AllNamespaces = False,
    phase: Annotated[str | None, typer.Option(help="only replicas in this phase, e.g. Breached")] = None,
    all_: Annotated[bool, typer.Option("--all", help="include completed workflows")] = False,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Replica workflows from Temporal visibility."""
    _check_output(output)
    from workflows.messages import Phase

    if phase is not None and phase not in {p.value for p in Phase}:
        raise typer.BadParameter(f"unknown phase {phase!r}; one of {', '.join(p.value for p in Phase)}",
                                 param_hint="'--phase'")
    from worker import render, replica_client

    scope = _scope(namespace, all_namespaces)

    async def body(client: Any) -> None:
        found = await replica_client.list_replicas(client, namespace=scope, phase=phase, include_closed=all_)
        if output != "table":
            _emit(found, output)
        else:
            render.replica_list(found)

    _run(temporal_address, temporal_namespace, body)


def _control(
    pcs: str, namespace: str | None, replica: int | None, temporal_address: str | None, temporal_namespace: str,
    output: str, send: Callable[[Any, str], Awaitable[Any]],
) -> None:
    _check_output(output)
    from worker import replica_client

    scope = _namespace(namespace)

    async def body(client: Any) -> list[tuple[str, Any]]:
        workflows = await replica_client.find_replicas(client, scope, pcs, replica)
        return [(w.workflow_id, await send(client, w.workflow_id)) for w in workflows]

    results = _run(temporal_address, temporal_namespace, body)
    if output != "table":
        from worker.output import wire

        _emit([{"workflowId": wid, **wire(r)} for wid, r in results], output)
    else:
        for wid, result in results:
            verdict = "accepted" if result.accepted else "rejected"
            typer.echo(f"{wid}: {verdict}: {result.message}", err=not result.accepted)
    if not all(r.accepted for _, r in results):
        raise typer.Exit(1)


def pause(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    namespace: Namespace = None,
    replica: Annotated[int | None, typer.Option("--replica", "-r", min=0, help="default: every replica")] = None,
    reason: Annotated[str, typer.Option(help="why; shown in status and the Temporal UI")] = "",
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Stop releasing gates and terminating (deadlines keep counting)."""
    from worker import replica_client

    _control(pcs, namespace, replica, temporal_address, temporal_namespace, output,
             lambda client, wid: replica_client.pause(client, wid, reason))


def resume(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    namespace: Namespace = None,
    replica: Annotated[int | None, typer.Option("--replica", "-r", min=0, help="default: every replica")] = None,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Undo pause; an expired, still-present breach is acted on at once."""
    from worker import replica_client

    _control(pcs, namespace, replica, temporal_address, temporal_namespace, output,
             lambda client, wid: replica_client.resume(client, wid))


def terminate(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    replica: Annotated[int, typer.Option("--replica", "-r", min=0, help="the PCS replica")],
    reason: Annotated[str, typer.Option(help="why; recorded with the termination")],
    namespace: Namespace = None,
    pcsg: Annotated[str | None, typer.Option(help="terminate one replica of this PodCliqueScalingGroup only")] = None,
    pcsg_replica: Annotated[int | None, typer.Option(min=0, help="the PCSG replica index")] = None,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Gang-terminate now, regardless of terminationDelay or pause; the replica is recreated."""
    if (pcsg is None) != (pcsg_replica is None):
        raise typer.BadParameter("--pcsg and --pcsg-replica go together", param_hint="'--pcsg-replica'")
    if not reason.strip():
        raise typer.BadParameter("must say why", param_hint="'--reason'")
    from worker import replica_client

    _control(pcs, namespace, replica, temporal_address, temporal_namespace, output,
             lambda client, wid: replica_client.terminate(client, wid, reason, pcsg, pcsg_replica))


def history(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    replica: Annotated[int, typer.Option("--replica", "-r", min=0)],
    namespace: Namespace = None,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """The replica's termination log: when, what, why, breach start and delay."""
    _check_output(output)
    from worker import render, replica_client

    scope = _namespace(namespace)

    async def body(client: Any) -> Any:
        (workflow,) = await replica_client.find_replicas(client, scope, pcs, replica)
        return await replica_client.replica_status(client, workflow.workflow_id)

    status = _run(temporal_address, temporal_namespace, body)
    if output != "table":
        _emit({"terminationsTotal": status.terminations_total, "terminations": status.terminations}, output)
    else:
        render.termination_log(status)
