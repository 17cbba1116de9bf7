"""The nudge protocol of the replica workflow: when to look again.

The watcher nudges a replica whenever something it cares about changes in Kubernetes. A timed nudge carries when it
was sent; another round follows only a nudge sent at or after the moment the observation in force began (an
observation that began later has already seen the change). An untimed nudge (an old watcher), or the workflow's own
"look again", always calls for another round. Transient: rebuilt by the next observation, never carried.

Deterministic (workflow code): no I/O, no clock; the one patch call is made where the class used to make it.
"""

from __future__ import annotations

from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.messages import Nudge, ReplicaSnapshot

# Nudges carry when they were sent; another round follows only a nudge sent after the last observation began.
TIMED_NUDGES_PATCH = "timed-nudges"


class Nudges:
    def __init__(self) -> None:
        self.look_again = True  # look again at the next chance (set by the workflow itself, or an untimed nudge)
        self.timed = False  # decided once per run, by TIMED_NUDGES_PATCH
        self.sent_at: datetime | None = None  # the latest timed nudge
        self.observed_from: datetime | None = None  # when the latest observation began (activity clock)

    def decide_timed(self) -> None:
        """Once per run, at its start: may timed nudges be told apart (a patch marker in new histories)?"""
        self.timed = workflow.patched(TIMED_NUDGES_PATCH)

    def received(self, nudge: Nudge | None) -> None:
        if nudge is None or not self.timed:
            self.look_again = True
        elif self.sent_at is None or nudge.sent_at > self.sent_at:
            self.sent_at = nudge.sent_at

    def pending(self) -> bool:
        """A timed nudge was sent at or after the observation in force began: it may show something new."""
        if self.sent_at is None:
            return False
        return self.observed_from is None or self.sent_at >= self.observed_from

    def due(self) -> bool:
        return self.look_again or self.pending()

    def observed(self, snapshot: ReplicaSnapshot, scheduled_at: datetime | None) -> None:
        """Remember when the observation in force began: the activity's own record, else (a snapshot from a worker
        that predates `read_from`) the workflow time the observe was scheduled, which is before any read."""
        began = snapshot.read_from or scheduled_at
        if began is not None and (self.observed_from is None or began > self.observed_from):
            self.observed_from = began
