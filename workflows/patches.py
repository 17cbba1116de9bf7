"""One marker for the patches a replica run starts under.

Each `workflow.patched` call that takes the new path records a marker, and the SDK's core adds an upsert of the
TemporalChangeVersion search attribute: two history events per patch, in every run (continue-as-new starts the count
again). With thirteen patches a replica run spent 10 to 20 of its events on them. A run begun by a release that
knows them all records REPLICA_BASELINE_PATCH instead, which stands for every patch in REPLICA_BASELINE: two events
per run. A run whose history lacks the baseline marker (begun by an older release) asks each patch as before, so
its history replays unchanged.

A patch added after this baseline is asked on its own (it is not in the set), until a later baseline includes it.
Pure workflow code: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection

from temporalio import workflow

REPLICA_BASELINE_PATCH = "replica-baseline-1"


class PatchSet:
    """`workflow.patched`, except that in a run begun under the baseline every patch it covers is taken without a
    marker of its own. `decide` must come first in the run, before any patch is asked."""

    def __init__(self, baseline: str, covers: Collection[str]) -> None:
        self._baseline_id = baseline
        self._covers = frozenset(covers)
        self.baseline = False

    def decide(self) -> None:
        self.baseline = workflow.patched(self._baseline_id)

    def __call__(self, patch_id: str) -> bool:
        if self.baseline and patch_id in self._covers:
            return True
        return workflow.patched(patch_id)
