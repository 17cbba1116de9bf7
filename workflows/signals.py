"""Bounded signals per run: what a replica workflow run has received, and when that calls for continue-as-new.

Temporal caps one run at 10,000 signals (further ones are refused: "exceeded workflow execution limit for signal
events") and 2,000 updates, and its continue-as-new suggestion counts history events, not messages. Every
Kubernetes change a replica cares about nudges it, so a busy or flapping replica can receive far more messages
than rounds. The replica workflow counts what each run received and hands over (continue-as-new, carrying its
state) once a budget well below those caps is spent. Under a storm the hand-over can be held up: Temporal refuses
to close a run while new signals wait (the workflow task fails with UnhandledCommand and is tried again, seen to
take ~10 s on the dev server), so the budgets leave that much room and more.

Pure counting and workflow.info(), no I/O: safe in workflow code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from temporalio import workflow

# Continue-as-new once a run has received this many signals / updates (ReplicaInput may lower or raise them).
SIGNALS_PER_RUN = 2_000  # Temporal refuses signals past 10,000 per run
UPDATES_PER_RUN = 500  # Temporal refuses updates past 2,000 per run

# Patch: continue-as-new when a run's message budget is spent (a new reason to issue the continue-as-new command).
SIGNAL_BUDGET_PATCH = "signal-budget"

# Continue-as-new once a run's history holds this many events. A worker that lost its cache (a restart) replays
# whole histories, all in one interpreter, at about 0.8 ms per event on a quiet core (measured on a 1,301-event
# replica history). In fault run seed 12 (rounds 25-45) replica histories had grown to 2,000-2,600 events; on two
# loaded cores their replays took 10-26 s each, overran the 10 s workflow task timeout, and were tried again and
# again: replicas were left unattended for up to 4 minutes. A 1,000-event run replays in under a second when quiet.
HISTORY_EVENTS_PER_RUN = 1_000
# Patch: continue-as-new past HISTORY_EVENTS_PER_RUN (a new reason to issue the continue-as-new command).
HISTORY_CAP_PATCH = "history-cap"


def _judged_length(counted: int | None) -> tuple[int, str]:
    """The length a hand-over is judged on, and what to call it in the reason: the one counted where there is one."""
    if counted is None:
        return workflow.info().get_current_history_length(), "history events"
    return counted, "history events counted"


def history_calls_for_handover(limit: int, patched: Callable[[str], bool] | None = None,
                               length: int | None = None) -> str | None:
    """Why the current run's history calls for continue-as-new now, or None. Workflow code only.

    `length`: the history length to judge by, where the caller counts it (COUNTED_EVENTS_RULE); the current task's
    otherwise. Temporal's continue-as-new suggestion is always the current task's (it comes at thousands of events).

    `limit` is the input's own history_event_limit. The patch is asked only when the run is past the cap and nothing
    else already calls for the hand-over, so histories recorded before the patch replay with the same commands.
    """
    info = workflow.info()
    length, events = _judged_length(length)
    if info.is_continue_as_new_suggested():
        return f"Temporal suggests it ({length} {events})"
    if length > limit:
        return f"{length} {events} (limit {limit})"
    if length > HISTORY_EVENTS_PER_RUN and (patched or workflow.patched)(HISTORY_CAP_PATCH):
        return f"{length} {events} (a replay stays short)"
    return None


# A quiet replica run (Available, nothing pending or in flight) hands over once its history is past
# QUIET_HISTORY_EVENTS. A worker that starts cold (a restart, a rolling upgrade of the workers, a run evicted from the
# workflow cache) replays a run whole before its first round: replays of recorded replica runs took 12 ms of worker
# CPU for 22 events, 76 ms for the 178 of a rolling update, 210 ms for 1,011 at the cap. A one-pod replica's run
# holds 16-25 events once Available and 65-79 after a rolling update (bench b5 --after-rollout); a 17-pod replica's
# 27-37 once Available (bench b3), so a new replica rarely hands over. A new run costs about ten events and a read
# (of the apiserver where this run's last read was: ReplicaWorkflow._next_input). With 1,000 one-pod replicas killed
# after a rolling update, the restarted worker recovered them all in 43 s with it and 75 s without (docs/benchmarks.md).
QUIET_HISTORY_EVENTS = 50
# Patch: continue-as-new when quiet past QUIET_HISTORY_EVENTS. Asked only there, so a recorded run replays as before.
# Input baseline 17 takes it in, so runs begun under it ask nothing there: a replay answers `patched` from the markers
# of the task it replays, and the code after a local activity's result can run a task later live than in a replay
# (fault run seed 7: tests/fixtures/incidents/README.md).
QUIET_HANDOVER_PATCH = "quiet-handover"
# Not a patch but a rule a run's input baseline takes in (workflows/patches.py PatchSet.covers): hand-overs are judged
# on the history length the run counts itself (EventTally), not on get_current_history_length(). That length is
# reported per workflow task, and a local activity that outlasts its task moves task boundaries between the first
# execution and a replay: measured on the dev server (Temporal 1.29.1, temporalio 1.x), a task whose local activity
# ran past the task timeout was followed by heartbeat tasks, and a replay ran it as one task reporting the length
# (and workflow time) of the last of them, also in the code before the activity; and in fault run seed 4 the first
# execution ran the code after a read in a task that followed the one its marker was recorded in, where a replay ran
# it in that first task (tests/fixtures/incidents/README.md). A count kept from what the run itself does and receives
# is the same in every replay. Asking a patch there would record a marker on that same unstable condition, so runs of
# baseline 13 and before keep the reported length and replay as recorded.
COUNTED_EVENTS_RULE = "handover-on-counted-events"
# Not a patch but a rule of input baseline 16: where a round ends, a hand-over is judged on what the run held when the
# round began (its messages, pause, turn, queued requests, nudges) and on what the round itself did (a turn it saw
# through to the end is over, a read answers the nudges it reached), never on a message taken while the round ran. A
# message that arrives while the round's last local activity runs reaches the workflow code before that activity's
# result in one execution and after it in another: the core groups them into activations differently live and in a
# replay (fault run seed 4: tests/fixtures/incidents/README.md). Judged with it, the run handed over live and a
# replay of the same history did not. Such a message is judged at the next wait instead: it wakes the run, or is
# handed on to the next run with whatever else it has not read.
ROUND_START_RULE = "handover-judged-as-of-round-start"


def quiet_calls_for_handover(quiet: Callable[[], bool], patched: Callable[[str], bool] | None = None,
                             length: int | None = None) -> str | None:
    """Why a run that is `quiet()` now should hand over, or None. Workflow code only; `quiet` is asked only past the
    threshold, and the patch only where both hold. `length` as for history_calls_for_handover."""
    length, events = _judged_length(length)
    if length > QUIET_HISTORY_EVENTS and quiet() and (patched or workflow.patched)(QUIET_HANDOVER_PATCH):
        return f"quiet at {length} {events} (a cold replay stays short)"
    return None


@dataclass
class Received:
    """Messages received by the current run (not carried across continue-as-new: the caps are per run)."""

    nudges: int = 0
    signals: int = 0  # every signal, nudges included
    updates: int = 0

    def signal(self, *, nudge: bool = False) -> None:
        self.signals += 1
        self.nudges += nudge

    def update(self) -> None:
        self.updates += 1

    def spent(self, signal_limit: int, update_limit: int) -> str | None:
        """Why this run should hand over now, or None."""
        if self.signals >= signal_limit:
            return f"{self.signals} signals received this run ({self.nudges} nudges; budget {signal_limit})"
        if self.updates >= update_limit:
            return f"{self.updates} updates received this run (budget {update_limit})"
        return None


# What each thing a run does or receives adds to its history, counting the workflow task it wakes the run in (three
# events: scheduled, started, completed) where it wakes one. Several signals taken in one task count a task each, and
# heartbeat tasks of a long local activity count none: a count, not a measurement (tests/workflows/ compare the two).
EVENTS_PER_SIGNAL = 4  # signaled + its task
EVENTS_PER_UPDATE = 5  # accepted, completed + its task
EVENTS_PER_ACTIVITY = 6  # scheduled, started, completed (or failed) + the task its result wakes
EVENTS_PER_LOCAL_ACTIVITY = 1  # its marker, in the task that ran it
EVENTS_PER_TIMER_STARTED = 1  # counted when the run starts it
EVENTS_PER_TIMER_FIRED = 4  # fired + its task
EVENTS_PER_TIMER_CANCELED = 1
EVENTS_PER_UPSERT = 1  # search attributes or memo
EVENTS_AT_RUN_START = 4  # started, and the first task


@dataclass
class EventTally:
    """The run's history length as the run counts it (COUNTED_EVENTS_RULE): kept by the workflow code from its own
    commands and the messages it takes, so every replay counts the same at the same point."""

    events: int = EVENTS_AT_RUN_START
    messages: int = 0  # the part of `events` that signals and updates added (ROUND_START_RULE)

    def add(self, events: int) -> None:
        self.events += events

    def add_message(self, events: int) -> None:
        self.events += events
        self.messages += events
