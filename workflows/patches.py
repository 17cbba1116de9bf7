"""One marker for the patches a replica run starts under.

Each `workflow.patched` call that takes the new path records a marker, and the SDK's core adds an upsert of the
TemporalChangeVersion search attribute: two history events per patch, in every run (continue-as-new starts the count
again). With thirteen patches a replica run spent 10 to 20 of its events on them. A run begun by a release that
knows them all records REPLICA_BASELINE_PATCH instead, which stands for every patch in REPLICA_BASELINE: two events
per run. A run whose history lacks the baseline marker (begun by an older release) asks each patch as before, so
its history replays unchanged.

Each later baseline (REPLICA_BASELINE_2_PATCH to REPLICA_BASELINE_12_PATCH) takes in the patches added since; a run
asks the newest first, so a run begun under an earlier one replays it unchanged.

From baseline 13 on, the baseline is not a marker but a number in the run's input (ReplicaInput.baseline), written by
whoever begins the run: the reconciler's start and the run before it (continue-as-new). The input is in the run's
first event, so a replay reads the same number, and the run records no marker and no search attribute upsert for it:
two history events fewer in every run. A run whose input has no number asks the markers as before, so every history
recorded before it replays unchanged.
Pure workflow code: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from temporalio import workflow

REPLICA_BASELINE_PATCH = "replica-baseline-1"
REPLICA_BASELINE_2_PATCH = "replica-baseline-2"  # baseline 1, plus decision-time
REPLICA_BASELINE_3_PATCH = "replica-baseline-3"  # baseline 2, plus one-safety-timer and timer-judged-deadlines
REPLICA_BASELINE_4_PATCH = "replica-baseline-4"  # baseline 3, plus nudged-cache-floor
REPLICA_BASELINE_5_PATCH = "replica-baseline-5"  # baseline 4, plus unversioned-nudges-counted
REPLICA_BASELINE_6_PATCH = "replica-baseline-6"  # baseline 5, plus decision-time-after-read
REPLICA_BASELINE_7_PATCH = "replica-baseline-7"  # baseline 6, plus ensure-releases-base
REPLICA_BASELINE_8_PATCH = "replica-baseline-8"  # baseline 7, plus local-releases and topology-from-ensure
REPLICA_BASELINE_9_PATCH = "replica-baseline-9"  # baseline 8, plus one-release-per-round
REPLICA_BASELINE_10_PATCH = "replica-baseline-10"  # baseline 9, plus mirror-with-read and handover-after-update-task
REPLICA_BASELINE_11_PATCH = "replica-baseline-11"  # baseline 10, plus local-ensure and mirror-with-ensure
REPLICA_BASELINE_12_PATCH = "replica-baseline-12"  # baseline 11, plus deadline-memo
INPUT_BASELINE_13 = 13  # baseline 12, in the run's input instead of a marker
INPUT_BASELINE_14 = 14  # baseline 13, plus hand-overs judged on the history length a run counts
INPUT_BASELINE_15 = 15  # baseline 14, plus a new replica's first read materialising it
INPUT_BASELINE_16 = 16  # baseline 15, plus a hand-over at a round's end judged as of the round's start
INPUT_BASELINE_17 = 17  # baseline 16, plus quiet-handover: no patch is asked where a run hands over
NEWEST_INPUT_BASELINE = INPUT_BASELINE_17  # what this release writes into the runs it begins


class NewerBaselineError(RuntimeError):
    """The run was begun under a baseline this release does not know: by a newer release. Raised in the workflow task,
    which fails and is retried (on a worker of that release, once one polls) rather than run under the wrong code."""


class PatchSet:
    """`workflow.patched`, except that in a run begun under a baseline every patch it covers is taken without a
    marker of its own. `decide` must come first in the run, before any patch is asked.

    `baselines`: each baseline marker and the patches it stands for, newest first; `recorded`: each baseline number a
    run's input may carry and the patches it stands for."""

    def __init__(self, *baselines: tuple[str, Collection[str]],
                 recorded: Mapping[int, Collection[str]] | None = None) -> None:
        self._baselines = [(patch_id, frozenset(covers)) for patch_id, covers in baselines]  # newest first
        self._recorded = {number: frozenset(covers) for number, covers in (recorded or {}).items()}
        self._covers: frozenset[str] = frozenset()
        self.baseline = False

    def decide(self, recorded: int | None = None) -> None:
        """`recorded`: the baseline number in the run's input, None where it has none (begun by an older release,
        or by a starter that leaves it out): then the markers decide."""
        if recorded is not None:
            if recorded not in self._recorded:
                raise NewerBaselineError(
                    f"this run was begun under patch baseline {recorded}; this worker knows baselines up to "
                    f"{max(self._recorded, default=0)}: it is for a newer release's workers")
            self.baseline, self._covers = True, self._recorded[recorded]
            return
        for patch_id, covers in self._baselines:
            if workflow.patched(patch_id):
                self.baseline, self._covers = True, covers
                return

    def covers(self, rule: str) -> bool:
        """Whether the run's baseline takes in `rule`, asking nothing and recording nothing: for a change that must
        not be asked as a patch where it applies (its condition is not the same in every replay)."""
        return self.baseline and rule in self._covers

    def __call__(self, patch_id: str) -> bool:
        if self.baseline and patch_id in self._covers:
            return True
        return workflow.patched(patch_id)
