"""Operator commands: status, list, pause, resume, terminate, history. Tables for people, `-o json` for scripts.

Exit codes: 0 done/accepted, 1 rejected or not found (the message names the argument), 2 usage error.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import typer

T = TypeVar("T")

Namespace = Annotated[str, typer.Option("--namespace", "-n", help="Kubernetes namespace of the PodCliqueSet")]
Output = Annotated[str, typer.Option("--output", "-o", help="table or json")]
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
    if output not in ("table", "json"):
        raise typer.BadParameter(f"must be 'table' or 'json', not {output!r}", param_hint="'--output'")


def _run(address: str | None, temporal_namespace: str, body: Callable[[Any], Awaitable[T]]) -> T:
    from worker.app import connect
    from worker.config import TemporalSettings
    from worker.ops import OperatorError, default_temporal_address

    async def main() -> T:
        settings = TemporalSettings(address=address or default_temporal_address(), namespace=temporal_namespace)
        try:
            client = await connect(settings)
        except Exception as exc:
            raise OperatorError(f"cannot reach Temporal at {settings.address} ({exc}); set --temporal-address") from exc
        return await body(client)

    try:
        return asyncio.run(main())
    except OperatorError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(1) from None


def _json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def status(
    pcs: Annotated[str | None, typer.Argument(help="PodCliqueSet name; all in the namespace when omitted")] = None,
    namespace: Namespace = "default",
    replica: Annotated[int | None, typer.Option("--replica", "-r", min=0)] = None,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Per replica: phase, paused, PodClique availability, pending terminationDelay deadlines."""
    _check_output(output)
    from worker import ops, render

    async def body(client: Any) -> None:
        if pcs is None:
            workflows = await ops.list_replicas(client, namespace=namespace)
            if replica is not None:
                workflows = [w for w in workflows if w.replica == replica]
        else:
            workflows = await ops.find_replicas(client, namespace, pcs, replica)
        statuses = await asyncio.gather(*(ops.replica_status(client, w.workflow_id) for w in workflows))
        if output == "json":
            _json([s.model_dump(mode="json") for s in statuses])
        else:
            render.statuses(list(statuses))

    _run(temporal_address, temporal_namespace, body)


def list_command(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="only this namespace")] = None,
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
    from worker import ops, render

    async def body(client: Any) -> None:
        found = await ops.list_replicas(client, namespace=namespace, phase=phase, include_closed=all_)
        if output == "json":
            _json([w.__dict__ for w in found])
        else:
            render.replica_list(found)

    _run(temporal_address, temporal_namespace, body)


def _control(
    pcs: str, namespace: str, replica: int | None, temporal_address: str | None, temporal_namespace: str,
    output: str, send: Callable[[Any, str], Awaitable[Any]],
) -> None:
    _check_output(output)
    from worker import ops

    async def body(client: Any) -> list[tuple[str, Any]]:
        workflows = await ops.find_replicas(client, namespace, pcs, replica)
        return [(w.workflow_id, await send(client, w.workflow_id)) for w in workflows]

    results = _run(temporal_address, temporal_namespace, body)
    if output == "json":
        _json([{"workflowId": wid, **r.model_dump(mode="json")} for wid, r in results])
    else:
        for wid, result in results:
            verdict = "accepted" if result.accepted else "rejected"
            typer.echo(f"{wid}: {verdict}: {result.message}", err=not result.accepted)
    if not all(r.accepted for _, r in results):
        raise typer.Exit(1)


def pause(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    namespace: Namespace = "default",
    replica: Annotated[int | None, typer.Option("--replica", "-r", min=0, help="default: every replica")] = None,
    reason: Annotated[str, typer.Option(help="why; shown in status and the Temporal UI")] = "",
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Stop releasing gates and terminating (deadlines keep counting)."""
    from worker import ops

    _control(pcs, namespace, replica, temporal_address, temporal_namespace, output,
             lambda client, wid: ops.pause(client, wid, reason))


def resume(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    namespace: Namespace = "default",
    replica: Annotated[int | None, typer.Option("--replica", "-r", min=0, help="default: every replica")] = None,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Undo pause; an expired, still-present breach is acted on at once."""
    from worker import ops

    _control(pcs, namespace, replica, temporal_address, temporal_namespace, output,
             lambda client, wid: ops.resume(client, wid))


def terminate(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    replica: Annotated[int, typer.Option("--replica", "-r", min=0, help="the PCS replica")],
    reason: Annotated[str, typer.Option(help="why; recorded with the termination")],
    namespace: Namespace = "default",
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
    from worker import ops

    _control(pcs, namespace, replica, temporal_address, temporal_namespace, output,
             lambda client, wid: ops.terminate(client, wid, reason, pcsg, pcsg_replica))


def history(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    replica: Annotated[int, typer.Option("--replica", "-r", min=0)],
    namespace: Namespace = "default",
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """The replica's termination log: when, what, why, breach start and delay."""
    _check_output(output)
    from worker import ops, render

    async def body(client: Any) -> Any:
        (workflow,) = await ops.find_replicas(client, namespace, pcs, replica)
        return await ops.replica_status(client, workflow.workflow_id)

    status = _run(temporal_address, temporal_namespace, body)
    if output == "json":
        _json({"terminationsTotal": status.terminations_total,
               "terminations": [t.model_dump(mode="json") for t in status.terminations]})
    else:
        render.termination_log(status)
