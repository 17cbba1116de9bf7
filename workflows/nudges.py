"""The nudge protocol of the replica workflow: when to look again.

The watcher nudges a replica whenever something it cares about changes in Kubernetes. A timed nudge carries when it
was sent; another round follows only a nudge sent at or after the moment the observation in force began (an
observation that began later has already seen the change). An untimed nudge (an old watcher), or the workflow's own
"look again", always calls for another round.

Carried across continue-as-new (`carry`/`resume`): nudges not read yet, and how far reads from a watch cache had
got. The watcher sends each change once, and the next run's first read may run on another worker whose cache lags;
without them a run that handed over with a change unread read that lagging cache, saw none of it, and waited for a
nudge already spent (fault run seed 13, round 23: a gang-terminated replica never recreated).

A nudge from the watcher also carries the resourceVersions of the watch events it stands for (workflows/
nudge_versions.py). Under VERSIONED_NUDGES_PATCH those decide alone: it calls for a round only if some kind's version
is past what the observation in force read of that kind. No clock enters that decision, so a watcher whose clock is
behind the activity worker's (another node, two worker replicas) never has a change taken as already seen.

A read from a watch cache must also have reached every version a nudge ever stood for, read or not (under
NUDGED_FLOOR_PATCH): those are watch events, so every healthy cache reaches them, and a cache that has not is behind
what an earlier read already saw. Without it, a read from the apiserver answered a nudge, and the next read came from
another worker's cache that was cut off from kube-apiserver and older than that read: it showed a breached PodClique
whole again, and the termination it was counting down to never came (fault run seed 14 on b82dc7c, round 42).

A nudge without versions (an item of a relist, the reconciler's nudge to a surplus replica) used to be judged by the
clock: covered if sent before the observation in force began. Under UNVERSIONED_COUNTED_PATCH no clock decides it:
it calls for one round, read from the apiserver, and only a read from the apiserver scheduled after the nudge arrived
answers it. Comparing the watcher's clock with another worker's took a change for seen: the watcher, 30 s behind,
relisted after an apiserver outage and nudged for a PodClique scaled 2 -> 3 -> 2 meanwhile; its stamp fell before
the other worker's last read began, and the surplus pod stayed for 3.5 minutes (fault run seed 14 on 3f8d58c,
round 42).

Deterministic (workflow code): no I/O, no clock; the patch calls are made where the class used to make them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.messages import Nudge, NudgeCarry, ReplicaSnapshot

# Nudges carry when they were sent; another round follows only a nudge sent after the last observation began.
TIMED_NUDGES_PATCH = "timed-nudges"
# Nudges that carry resourceVersions are judged by them, not by the clock.
VERSIONED_NUDGES_PATCH = "versioned-nudges"
# A read from a watch cache must have reached every nudged version, not only the unread ones.
NUDGED_FLOOR_PATCH = "nudged-cache-floor"
# A nudge without versions is counted, not timed: one round from the apiserver, whatever its stamp says.
UNVERSIONED_COUNTED_PATCH = "unversioned-nudges-counted"


class Nudges:
    def __init__(self) -> None:
        self.look_again = True  # look again at the next chance (set by the workflow itself, or an untimed nudge)
        self.timed = False  # decided once per run, by TIMED_NUDGES_PATCH
        self.sent_at: datetime | None = None  # the latest timed nudge
        self.observed_from: datetime | None = None  # when the latest observation began (activity clock)
        self.versioned = False  # decided once per run, by VERSIONED_NUDGES_PATCH
        self.nudged_floor = False  # decided once per run, by NUDGED_FLOOR_PATCH
        self.counted = False  # decided once per run, by UNVERSIONED_COUNTED_PATCH
        self.unversioned = 0  # nudges without versions received this run (that patch)
        self.unversioned_answered = 0  # how many of them a read from the apiserver scheduled after them answers
        self.versions: dict[str, int] = {}  # kind -> newest resourceVersion a versioned nudge stood for
        self.read_versions: dict[str, int] = {}  # kind -> the resourceVersion the observation in force read up to
        self.untimed = False  # an untimed nudge arrived since the last read from the apiserver
        # kind -> the resourceVersion reads from a watch cache have reached (this run's and, carried, earlier runs'):
        # a later read from a cache must not be older, whichever worker's cache it is (caches lag by different amounts)
        self.cache_floor: dict[str, int] = {}

    def decide_timed(self, patched: Callable[[str], bool]) -> None:
        """Once per run, at its start: may timed (and versioned) nudges be told apart (patch markers in new
        histories)? Asked in this order, always: a history recorded before the versioned path replays unchanged."""
        self.timed = patched(TIMED_NUDGES_PATCH)
        self.versioned = self.timed and patched(VERSIONED_NUDGES_PATCH)
        self.nudged_floor = self.versioned and patched(NUDGED_FLOOR_PATCH)
        self.counted = self.nudged_floor and patched(UNVERSIONED_COUNTED_PATCH)

    def received(self, nudge: Nudge | None) -> None:
        if self.counted and (nudge is None or not nudge.versions):
            self.look_again = True
            self.unversioned += 1
        elif nudge is None or not self.timed:
            self.look_again = self.untimed = True
        elif nudge.versions and self.versioned:
            for kind, version in nudge.versions.items():
                self.versions[kind] = max(version, self.versions.get(kind, version))
        elif self.sent_at is None or nudge.sent_at > self.sent_at:
            self.sent_at = nudge.sent_at

    def pending(self) -> bool:
        """A nudge may show something new: a watch event past what the observation in force read of its kind, or a
        nudge without versions sent at or after that observation began."""
        if any(version > self.read_versions.get(kind, -1) for kind, version in self.versions.items()):
            return True
        return self._clock_pending()

    def _clock_pending(self) -> bool:
        """A nudge judged by the clock, sent at or after the observation in force began (or before any)."""
        return self.sent_at is not None and (self.observed_from is None or self.sent_at >= self.observed_from)

    def fresh_needed(self) -> bool:
        """A nudge without versions that no read from the apiserver covers yet: one judged by the clock, or an
        untimed one, or (under UNVERSIONED_COUNTED_PATCH) any nudge without versions received since the latest
        read from the apiserver was scheduled. A read from the watch cache answers none (nothing says what changed)."""
        return self.untimed or self._clock_pending() or self.unversioned > self.unversioned_answered

    def reading(self) -> int:
        """Taken when a read is scheduled, handed to `observed`: the nudges without versions that read answers if
        it is from the apiserver (each arrived before it was scheduled, so its change was already in the store)."""
        return self.unversioned

    def unread_versions(self) -> dict[str, int]:
        """kind -> the newest nudged resourceVersion past what the observation in force read: what a read from the
        watch cache must have reached."""
        return {kind: version for kind, version in self.versions.items()
                if version > self.read_versions.get(kind, -1)}

    def cache_at_least(self) -> dict[str, int]:
        """What a read from a watch cache must have reached: every unread nudge (every nudge at all, under
        NUDGED_FLOOR_PATCH), and no older than any earlier read from a cache (never from the apiserver: a LIST's
        version is the store's, past what a watch of one kind may ever deliver)."""
        floor = self._floor()
        for kind, version in self.unread_versions().items():
            floor[kind] = max(version, floor.get(kind, version))
        return floor

    def _floor(self) -> dict[str, int]:
        floor = dict(self.cache_floor)
        if self.nudged_floor:
            for kind, version in self.versions.items():
                floor[kind] = max(version, floor.get(kind, version))
        return floor

    def carry(self) -> NudgeCarry:
        return NudgeCarry(unread=self.unread_versions(), floor=self._floor(), fresh=self.fresh_needed())

    def resume(self, carried: NudgeCarry) -> bool:
        """Take over what the previous run handed on; returns whether the first read must be from the apiserver."""
        if self.versioned:
            for kind, version in carried.unread.items():
                self.versions[kind] = max(version, self.versions.get(kind, version))
        self.cache_floor.update(carried.floor)
        return carried.fresh

    def due(self) -> bool:
        return self.look_again or self.pending()

    def observed(self, snapshot: ReplicaSnapshot, scheduled_at: datetime | None, reading: int = 0) -> None:
        """Remember when the observation in force began: the activity's own record, else (a snapshot from a worker
        that predates `read_from`) the workflow time the observe was scheduled, which is before any read.
        `reading`: what `reading()` said when this read was scheduled."""
        if not snapshot.from_cache:
            self.untimed = False
            self.unversioned_answered = max(reading, self.unversioned_answered)
        began = snapshot.read_from or scheduled_at
        if began is not None and (self.observed_from is None or began > self.observed_from):
            self.observed_from = began
        for kind, version in snapshot.read_versions.items():
            self.read_versions[kind] = max(version, self.read_versions.get(kind, version))
            if snapshot.from_cache:
                self.cache_floor[kind] = max(version, self.cache_floor.get(kind, version))
        # A kind this observation did not read (the PodCliqueSet is gone, its name cannot be a label value, an
        # apiserver without integer versions) has nothing a further round could read either: never wait on it.
        for kind in [k for k in self.versions if k not in snapshot.read_versions]:
            del self.versions[kind]
