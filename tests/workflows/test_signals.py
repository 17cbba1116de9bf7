"""A run's message budget (workflows/signals.py): what it counts and when it calls for continue-as-new."""

from __future__ import annotations

from workflows.messages import ReplicaInput, ReplicaRef
from workflows.signals import (
    EVENTS_AT_RUN_START,
    EVENTS_PER_SIGNAL,
    QUIET_HANDOVER_PATCH,
    QUIET_HISTORY_EVENTS,
    SIGNALS_PER_RUN,
    UPDATES_PER_RUN,
    EventTally,
    Received,
    quiet_calls_for_handover,
)


def test_signals_and_updates_are_counted_and_spend_their_own_budgets() -> None:
    received = Received()
    for _ in range(3):
        received.signal(nudge=True)
    received.signal()
    received.update()
    assert (received.nudges, received.signals, received.updates) == (3, 4, 1)
    assert received.spent(signal_limit=5, update_limit=2) is None
    received.signal(nudge=True)
    assert received.spent(signal_limit=5, update_limit=2) == "5 signals received this run (4 nudges; budget 5)"
    assert Received(updates=2).spent(signal_limit=5, update_limit=2) == "2 updates received this run (budget 2)"


def test_the_default_budgets_stay_well_below_temporals_per_run_caps() -> None:
    defaults = ReplicaInput(ref=ReplicaRef(namespace="n", pcs="p", pcs_uid="u", replica=0))
    assert (defaults.signal_limit, defaults.update_limit) == (SIGNALS_PER_RUN, UPDATES_PER_RUN)
    assert SIGNALS_PER_RUN * 4 <= 10_000 and UPDATES_PER_RUN * 4 <= 2_000


def test_a_quiet_hand_over_is_judged_on_the_length_it_is_given() -> None:
    """A run under COUNTED_EVENTS_RULE passes the length it counts: past the threshold it asks the patch and hands
    over, at or below it asks nothing (outside a workflow: no current length is read)."""
    asked: list[str] = []

    def patched(patch_id: str) -> bool:
        asked.append(patch_id)
        return True

    assert quiet_calls_for_handover(lambda: True, patched, QUIET_HISTORY_EVENTS) is None
    assert asked == []
    reason = quiet_calls_for_handover(lambda: True, patched, QUIET_HISTORY_EVENTS + 1)
    assert reason is not None and f"{QUIET_HISTORY_EVENTS + 1} history events counted" in reason
    assert asked == [QUIET_HANDOVER_PATCH]
    assert quiet_calls_for_handover(lambda: False, patched, QUIET_HISTORY_EVENTS + 1) is None
    assert asked == [QUIET_HANDOVER_PATCH]


def test_the_tally_counts_from_the_run_start() -> None:
    tally = EventTally()
    assert tally.events == EVENTS_AT_RUN_START
    tally.add(EVENTS_PER_SIGNAL)
    assert tally.events == EVENTS_AT_RUN_START + EVENTS_PER_SIGNAL
