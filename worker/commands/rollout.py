"""`grove-temporal rollout status|pause|resume PCS`: see and steer a PodCliqueSet's rolling update (DESIGN §4.9).

They talk to the PCS's rollout workflow (`rollout/<namespace>/<name>/<uid>`, found through Temporal visibility):
the status query, and the `pause`/`resume` updates (also available as signals of the same names).
The namespace is chosen as for the other operator commands (`-n`, else the kubeconfig context's, else `default`);
`-o json|yaml` prints the shared CLI schema (worker/output.py). Exit codes: 0 done/accepted, 1 not found or rejected (the message names the argument), 2 usage error.
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
from workflows.contract import PAUSE, RESUME, STATUS_QUERY

rollout_app = typer.Typer(help="See, pause and resume the rolling update of a PodCliqueSet.", no_args_is_help=True)
Pcs = Annotated[str, typer.Argument(help="PodCliqueSet name")]


def register(app: typer.Typer) -> None:
    app.add_typer(rollout_app, name="rollout")


async def _find(client: Any, namespace: str, pcs: str) -> str:
    from worker.replica_client import OperatorError
    from workflows.contract import rollout_query

    found = [w.id async for w in client.list_workflows(rollout_query(namespace=namespace, pcs=pcs))]
    if not found:
        raise OperatorError(f"PodCliqueSet {namespace}/{pcs}: no running rollout workflow (check the name and "
                            "--namespace, that the PCS is applied, and that a worker is running)")
    return str(sorted(found)[-1])


@rollout_app.command("status")
def status(pcs: Pcs, namespace: Namespace = None, output: Output = "table", temporal_address: Address = None,
           temporal_namespace: TemporalNamespace = "default") -> None:
    """Phase, generation, whose turn it is, replicas updated, and the rollout log."""
    _check_output(output)
    from workflows.rollout_messages import RolloutStatus

    scope = _namespace(namespace)

    async def body(client: Any) -> RolloutStatus:
        handle = client.get_workflow_handle(await _find(client, scope, pcs))
        result: RolloutStatus = await handle.query(STATUS_QUERY, result_type=RolloutStatus)
        return result

    result = _run(temporal_address, temporal_namespace, body)
    if output != "table":
        _emit(result, output)
        return
    typer.echo(f"{result.ref}  {result.phase}  strategy {result.strategy}  generation {result.generation_hash or '-'}"
               f"  updated {result.updated_replicas}/{len(result.replicas)}")
    if result.current is not None:
        typer.echo(f"turn: replica {result.current} since {result.current_since:%H:%M:%S}" if result.current_since
                   else f"turn: replica {result.current}")
    if result.paused:
        typer.echo(f"PAUSED{': ' + result.pause_reason if result.pause_reason else ''}")
    if result.halted:
        typer.echo(f"HALTED: {result.halted}")
    for problem in result.problems:
        typer.echo(f"spec problem: {problem}")
    if result.replicas:
        typer.echo("REPLICA  UPDATED  AVAILABLE  OUTDATED")
        for r in result.replicas:
            typer.echo(f"{r.index:<8} {str(r.updated).lower():<8} {str(r.available).lower():<10} "
                       f"{str(r.outdated).lower()}")
    for step in result.log[-15:]:
        typer.echo(f"{step.at:%H:%M:%S}  {step.what}")


def _control(pcs: str, namespace: str | None, output: str, address: str | None, temporal_namespace: str, name: str,
             arg: Any | None) -> None:
    _check_output(output)
    from workflows.rollout_messages import RolloutControlResult

    scope = _namespace(namespace)

    async def body(client: Any) -> tuple[str, RolloutControlResult]:
        workflow_id = await _find(client, scope, pcs)
        handle = client.get_workflow_handle(workflow_id)
        if arg is None:
            result = await handle.execute_update(name, result_type=RolloutControlResult)
        else:
            result = await handle.execute_update(name, arg, result_type=RolloutControlResult)
        return workflow_id, result

    workflow_id, result = _run(address, temporal_namespace, body)
    if output != "table":
        _emit({"workflowId": workflow_id, "accepted": result.accepted, "message": result.message}, output)
    else:
        typer.echo(f"{workflow_id}: {'accepted' if result.accepted else 'rejected'}: {result.message}")
    if not result.accepted:
        raise typer.Exit(1)


@rollout_app.command("pause")
def pause(pcs: Pcs, namespace: Namespace = None,
          reason: Annotated[str, typer.Option(help="why; shown in rollout status and the Temporal UI")] = "",
          output: Output = "table", temporal_address: Address = None,
          temporal_namespace: TemporalNamespace = "default") -> None:
    """Stop recreating pods (the replica whose turn it is keeps it; no new turn starts)."""
    from workflows.rollout_messages import RolloutControl

    _control(pcs, namespace, output, temporal_address, temporal_namespace, PAUSE, RolloutControl(reason=reason))


@rollout_app.command("resume")
def resume(pcs: Pcs, namespace: Namespace = None, output: Output = "table", temporal_address: Address = None,
           temporal_namespace: TemporalNamespace = "default") -> None:
    """Undo pause; also restarts a rollout halted by its progressDeadline (the replica's turn starts afresh)."""
    _control(pcs, namespace, output, temporal_address, temporal_namespace, RESUME, None)
