"""Rich tables for the operator commands (people read these; scripts use -o json)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from grove.durations import format_duration
from grove.termination import clock
from worker.replica_client import ReplicaExecution
from workflows.messages import ReplicaStatus

if TYPE_CHECKING:
    from worker.doctor import ResetOutcome, StuckWorkflow

_PHASE_STYLE = {"Available": "green", "Breached": "bold red", "Terminating": "red", "Invalid": "yellow",
                "Scheduling": "cyan", "Creating": "cyan", "Starting": "cyan"}


def _console() -> Console:
    # Piped output has no terminal width; rich would assume 80 columns and cut names and ids short.
    return Console(soft_wrap=True, width=None if sys.stdout.isatty() else 220)


def _phase(phase: str) -> str:
    style = _PHASE_STYLE.get(phase)
    return f"[{style}]{phase}[/{style}]" if style else phase


def replica_list(workflows: Sequence[ReplicaExecution]) -> None:
    console = _console()
    if not workflows:
        console.print("no replica workflows")
        return
    table = Table("NAMESPACE", "PODCLIQUESET", "REPLICA", "PHASE", "PAUSED", "RUNNING", "STARTED", "WORKFLOW ID")
    for w in workflows:
        table.add_row(w.namespace, w.pcs, str(w.replica), _phase(w.phase), "yes" if w.paused else "",
                      "yes" if w.running else "no", w.started.strftime("%Y-%m-%d %H:%M:%S") if w.started else "",
                      w.workflow_id)
    console.print(table)


def statuses(items: Sequence[ReplicaStatus], placement: Callable[[ReplicaStatus], list[str]] = lambda _s: []) -> None:
    """`placement`: lines saying why a waiting base gang is not placed (worker.placement, read from Kubernetes)."""
    console = _console()
    if not items:
        console.print("no running replica workflows")
        return
    now = datetime.now(UTC)
    for status in items:
        ref = status.ref
        head = (f"[bold]{ref.namespace}/{ref.pcs}[/bold] replica {ref.replica}: {_phase(status.phase.value)}"
                f" · incarnation {status.incarnation} · terminations {status.terminations_total}")
        if status.paused:
            head += f" · [bold yellow]PAUSED[/bold yellow] {status.pause_reason}"
        console.print(head)
        for problem in status.problems:
            console.print(f"  [yellow]problem:[/yellow] {problem}")
        if status.waiting_for:
            why = " (scheduled all together or not at all)" if status.scheduler_backend == "kube" else ""
            console.print(f"  base gang waiting for: {', '.join(status.waiting_for)}{why}")
            for line in placement(status):
                console.print(f"    {line}", markup=False)
        if status.scheduler_backend:
            console.print(f"  scheduler backend: {status.scheduler_backend}")
        for line in status.startup:
            console.print(f"  startup order: {line}")
        table = Table("PODCLIQUE", "READY/MIN", "SCHEDULED", "GATED", "WAS AVAILABLE", "BREACHED", "REASON",
                      box=None, pad_edge=False)
        for c in status.cliques:
            breached = "[red]True[/red]" if c.breached == "True" else c.breached
            table.add_row(c.name, f"{c.ready}/{c.min_available}", str(c.scheduled), str(c.gated),
                          "yes" if c.was_available else "no", breached, c.reason)
        console.print(table)
        for d in status.deadlines:
            left = (d.due_at - now).total_seconds()
            console.print(f"  [red]deadline[/red] {d.scope.value} {d.target}: due {clock(d.due_at)} "
                          f"({'in ' + duration_text(left) if left > 0 else 'now'}) — {d.cause}")
        for held in status.held:
            console.print(f"  [bold red]due, held[/bold red] ({'paused' if status.paused else 'spec invalid'}): {held}")
        for rejected in status.rejected:
            console.print(f"  [yellow]rejected:[/yellow] {rejected}")
        console.print()


def duration_text(seconds: float) -> str:
    from datetime import timedelta

    return format_duration(timedelta(seconds=round(seconds)))


def termination_log(status: ReplicaStatus) -> None:
    console = _console()
    ref = status.ref
    console.print(f"[bold]{ref.namespace}/{ref.pcs}[/bold] replica {ref.replica}: "
                  f"{status.terminations_total} termination(s), showing the last {len(status.terminations)}")
    if not status.terminations:
        return
    table = Table("#", "AT", "INCARNATION", "SCOPE", "TARGET", "BREACH SINCE", "DELAY", "DEADLINE")
    for number, t in enumerate(status.terminations, 1):
        target = f"{t.scaling_group}[{t.scaling_group_replica}]" if t.scaling_group else "whole replica"
        table.add_row(
            str(number), t.at.strftime("%Y-%m-%d %H:%M:%S"), str(t.incarnation),
            t.scope.value + (" (forced)" if t.forced else ""), target,
            clock(t.breach_start) if t.breach_start else "-", format_duration(t.delay) if t.delay else "-", clock(t.deadline),
        )
    console.print(table)
    for number, t in enumerate(status.terminations, 1):  # reasons are sentences: no column can hold them
        console.print(f"{number}. {t.reason}", highlight=False)


def stuck_workflows(found: Sequence[StuckWorkflow]) -> None:
    console = _console()
    if not found:
        console.print("no stuck replica workflows")
        return
    table = Table("WORKFLOW ID", "ATTEMPTS", "FAILING SINCE", "CAUSE", "FAILING EVENT", box=None, pad_edge=False)
    for s in found:
        table.add_row(s.workflow_id, str(s.attempts), s.failing_since.strftime("%Y-%m-%d %H:%M:%S")
                      if s.failing_since else "", s.cause, s.failing_event or "-")
    console.print(table)
    for s in found:  # messages are sentences: no column can hold them
        console.print(f"{s.workflow_id}: {s.message}" + (f" (history event {s.failed_event_id})"
                                                          if s.failed_event_id else ""), markup=False)
    console.print("heal one with: grove-temporal reset PCS --replica N -n NAMESPACE", markup=False)


def reset_outcome(outcome: ResetOutcome) -> None:
    console = _console()
    plan = outcome.plan
    verb = "would reset" if outcome.new_run_id is None else "reset"
    console.print(f"{outcome.workflow_id}: {verb} run {outcome.old_run_id} to event {plan.event_id} (redoing the "
                  f"workflow task started at event {plan.task_started_event_id})", markup=False)
    if plan.replay_error:
        console.print(f"  this build's replay fails: {plan.replay_error}", markup=False)
    activities = ", ".join(f"{name} x{count}" for name, count in plan.discarded_activities.items()) or "none"
    console.print(f"  discarded: {plan.discarded_events} events (completed activities: {activities}); reapplied: "
                  f"{plan.reapplied_signals} signals, {plan.reapplied_updates} updates", markup=False)
    if outcome.signals_may_be_held:
        console.print("  and any signal sent while its workflow task keeps failing: Temporal holds those back from the "
                      "history until a task ends, so they are not counted here; the reset reapplies them too",
                      markup=False)
    if outcome.new_run_id:
        console.print(f"  new run {outcome.new_run_id}", markup=False)
