"""A run's message budget (workflows/signals.py): what it counts and when it calls for continue-as-new."""

from __future__ import annotations

from workflows.messages import ReplicaInput, ReplicaRef
from workflows.signals import SIGNALS_PER_RUN, UPDATES_PER_RUN, Received


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
