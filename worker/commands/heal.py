"""`grove-temporal doctor` lists replica workflows whose workflow tasks keep failing; `grove-temporal reset` heals
one by resetting it to its last good workflow task (worker/doctor.py says how both work).

Exit codes: 0 done, 1 refused or not found (the message says why, naming the argument), 2 usage.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from worker.commands.ops import (
    Address,
    Namespace,
    Output,
    TemporalNamespace,
    _check_output,
    _emit,
    _namespace,
    _run,
)


def register(app: typer.Typer) -> None:
    app.command("doctor")(doctor)
    app.command("reset")(reset)


def doctor(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="only this Kubernetes namespace")] = None,
    min_attempts: Annotated[int, typer.Option(min=1, help="failed attempts of one workflow task that make it stuck")] = 3,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Replica workflows whose workflow task keeps failing: since when, how often, and the failing event."""
    _check_output(output)
    from worker import doctor as checks
    from worker import render

    async def body(client: Any) -> list[checks.StuckWorkflow]:
        return await checks.find_stuck(client, namespace=namespace, min_attempts=min_attempts)

    found = _run(temporal_address, temporal_namespace, body)
    if output != "table":
        _emit([s.as_dict() for s in found], output)
    else:
        render.stuck_workflows(found)


def reset(
    pcs: Annotated[str, typer.Argument(help="PodCliqueSet name")],
    replica: Annotated[int, typer.Option("--replica", "-r", min=0, help="the PCS replica")],
    namespace: Namespace = None,
    reason: Annotated[str, typer.Option(help="why; recorded in the workflow history")] = "grove-temporal reset",
    event_id: Annotated[int | None, typer.Option(
        min=1, help="reset to this event (the end of a workflow task) instead of the last one that replays")] = None,
    dry_run: Annotated[bool, typer.Option(help="say where it would reset and what it would discard; do nothing")] = False,
    output: Output = "table",
    temporal_address: Address = None,
    temporal_namespace: TemporalNamespace = "default",
) -> None:
    """Reset a stuck replica workflow to its last good workflow task; signals and updates after it are reapplied."""
    _check_output(output)
    if not reason.strip():
        raise typer.BadParameter("must say why", param_hint="'--reason'")
    from worker import doctor as checks
    from worker import render, replica_client

    async def body(client: Any) -> checks.ResetOutcome:
        (workflow,) = await replica_client.find_replicas(client, _namespace(namespace), pcs, replica)
        try:
            return await checks.reset(client, workflow.workflow_id, reason=reason, event_id=event_id,
                                      dry_run=dry_run)
        except checks.DoctorError as err:
            raise replica_client.OperatorError(f"{workflow.workflow_id}: {err}") from err

    outcome = _run(temporal_address, temporal_namespace, body)
    if output != "table":
        _emit(outcome.as_dict(), output)
    else:
        render.reset_outcome(outcome)
