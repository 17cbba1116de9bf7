"""A replica workflow's part of a rolling update (DESIGN §4.9): act on the turn the rollout workflow granted.

Deterministic (workflow code). Each round, while this replica has a turn for the generation hash its snapshot
shows: grove.rollout.replica_step says which outdated pods / PCSG replicas to recreate within maxUnavailable and
which PodCliques are being updated (their MinAvailableBreached becomes Unknown/UpdateInProgress, was-available is
not set, nothing of them is gang-terminated); the recreate activity deletes them with UID preconditions on the
state this round read, and the next materialisation recreates them from the current template. When every
PodClique is updated and Ready >= minAvailable the turn ends and the rollout workflow is told; a component that
shows no progress for its progressDeadline halts the turn (told too).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from grove.rollout import ReplicaStep, advance_progress, deadline_due, replica_step
    from grove.topology import ReplicaTopology
    from workflows import presentation
    from workflows.contract import RECREATE_FOR_UPDATE, ROLLOUT_REPORT_SIGNAL, rollout_workflow_id
    from workflows.messages import (
        RecreateRequest,
        RecreateResult,
        ReplicaRef,
        ReplicaSnapshot,
        ReplicaState,
        StepRecheck,
    )
    from workflows.rollout_messages import ReplicaRolloutCarry, RolloutTurn, RolloutView, TurnReport

# Recreating pods for a rolling update, and telling the rollout workflow how a turn ended, are commands a workflow
# written before rolling updates never issued (docs/architecture.md, "Upgrading the workflow safely").
ROLLOUT_PATCH = "rolling-updates"

RunActivity = Callable[[str, Any, type, str], Awaitable[Any]]


class ReplicaRollout:
    """Acts on the turn, progress marks and halt kept in the replica workflow's durable state (`owner.rollout`,
    carried whole across continue-as-new); holds nothing durable itself."""

    def __init__(self, ref: ReplicaRef, owner: ReplicaState, patched: Callable[[str], bool]) -> None:
        self.ref = ref
        self.owner = owner
        self._patched = patched  # the replica's PatchSet (workflows/patches.py)
        self.step: ReplicaStep | None = None  # transient: the last round's step
        self.due: datetime | None = None  # transient: the earliest progressDeadline of the last round
        self.turns_ended = 0  # transient: turns this run's rounds have seen through to the end

    @property
    def state(self) -> ReplicaRolloutCarry:
        return self.owner.rollout or ReplicaRolloutCarry()

    @state.setter
    def state(self, value: ReplicaRolloutCarry) -> None:
        self.owner.rollout = value if value != ReplicaRolloutCarry() else None

    @property
    def active(self) -> bool:
        turn = self.state.turn
        return turn is not None and not turn.revoked

    def grant(self, turn: RolloutTurn) -> bool:
        """Signal handler: keep the newest grant; a new seq starts a fresh progress clock. True if it changed."""
        current = self.state.turn
        if current is not None and turn.seq <= current.seq:
            return False
        fresh = current is None or turn.seq != current.seq
        self.state = self.state.model_copy(update={
            "turn": turn,
            "marks": {} if fresh else self.state.marks,
            "halted": "" if fresh else self.state.halted,
        })
        workflow.logger.info("rollout turn %d for generation %s%s", turn.seq, turn.generation_hash,
                             " (paused)" if turn.paused else " (revoked)" if turn.revoked else "")
        return True

    async def round(self, topology: ReplicaTopology, snapshot: ReplicaSnapshot, *, hold: bool,
                    run_activity: RunActivity, now: datetime | None = None,
                    due_by: datetime | None = None) -> frozenset[str]:
        """Act on the turn, if any; returns the PodCliques being updated (for the availability evaluation). `now`:
        the replica workflow's decision time (progress is stamped with it); `due_by`: where set, progress deadlines
        are judged by it instead (grove/rollout.advance_progress)."""
        self.step, self.due = None, None
        turn = self.state.turn
        spec = snapshot.rollout
        if turn is None or turn.revoked or spec is None:
            return frozenset()
        step = replica_step(topology, presentation.rollout_progress(snapshot.cliques), spec)
        self.step = step
        if spec.generation_hash != turn.generation_hash:
            # The spec moved on since the grant (or this read is older than it): recreate nothing until the rollout
            # workflow retargets; the replica still counts as being updated.
            self._note(f"waiting: the spec's generation is {spec.generation_hash}, the turn's {turn.generation_hash}")
            return step.in_progress
        now = now or workflow.now()
        marks, exceeded = advance_progress(self.state.marks, step, now, spec, due_by)
        self.state = self.state.model_copy(update={"marks": marks})
        if step.done:
            await self._report(turn, "done", f"replica {self.ref.replica} updated to {turn.generation_hash} "
                                             "and Ready >= minAvailable")
            self.state = ReplicaRolloutCarry(reported=self.state.reported, last_step="turn complete")
            self.turns_ended += 1
            self.step = None
            return frozenset()
        if self.state.halted:
            return step.in_progress
        if exceeded:
            why = (f"progressDeadline exceeded by {', '.join(exceeded)}: "
                   + "; ".join(f"{c}: {step.pending.get(c, 'no progress')}" for c in exceeded))
            workflow.logger.warning("rollout halted: %s", why)
            self.state = self.state.model_copy(update={"halted": why})
            await self._report(turn, "halted", why)
            return step.in_progress
        self.due = deadline_due(marks, step, spec)
        if turn.paused or hold or not step.acts:
            self._note("paused" if turn.paused or hold else "; ".join(f"{c}: {w}" for c, w in step.pending.items()))
            return step.in_progress
        if not self._patched(ROLLOUT_PATCH):
            return step.in_progress
        # What the step was decided on, for the activity to decide it again where it is a retry or starts late. No
        # patch: a replay does not compare an activity's input, and no command depends on what it does with it.
        recheck = StepRecheck(topology=topology, spec=spec, read_at=snapshot.read_at,
                              targets={name: s.target_hash for name, s in snapshot.cliques.items() if s.target_hash})
        request = RecreateRequest(ref=self.ref, pods=step.delete_pods, cliques=step.delete_cliques,
                                  generation_hash=turn.generation_hash, units=step.recreating, recheck=recheck)
        result = await run_activity(RECREATE_FOR_UPDATE, request, RecreateResult,
                                    f"rolling update: recreate {', '.join(step.recreating)}")
        self._note("recreated " + ", ".join(step.recreating)
                   + (f"; deferred on a later read: {', '.join(result.deferred)}" if result.deferred else ""))
        return step.in_progress

    def _note(self, text: str) -> None:
        self.state = self.state.model_copy(update={"last_step": text[:300]})

    async def _report(self, turn: RolloutTurn, outcome: str, message: str) -> None:
        if self.state.reported >= turn.seq or not self._patched(ROLLOUT_PATCH):
            return
        report = TurnReport(replica=self.ref.replica, seq=turn.seq, generation_hash=turn.generation_hash,
                            outcome=outcome, message=message, at=workflow.now())
        handle = workflow.get_external_workflow_handle(
            rollout_workflow_id(self.ref.namespace, self.ref.pcs, self.ref.pcs_uid))
        try:
            await handle.signal(ROLLOUT_REPORT_SIGNAL, report)
        except Exception as err:  # the rollout workflow is gone: its successor reads the cluster anyway
            workflow.logger.warning("could not report turn %d (%s): %s", turn.seq, outcome, err)
        self.state = self.state.model_copy(update={"reported": turn.seq})

    def view(self) -> RolloutView | None:
        turn = self.state.turn
        if turn is None or turn.revoked:
            return None
        return RolloutView(seq=turn.seq, generation_hash=turn.generation_hash, paused=turn.paused,
                           halted=self.state.halted,
                           in_progress=tuple(sorted(self.step.in_progress)) if self.step else (),
                           last_step=self.state.last_step)

    def markdown(self) -> str:
        view = self.view()
        if view is None:
            return ""
        state = "HALTED: " + view.halted if view.halted else "paused" if view.paused else "rolling"
        lines = [f"**Rolling update** to `{view.generation_hash}` (turn {view.seq}): {state}"]
        if view.in_progress:
            lines.append("Updating: " + ", ".join(view.in_progress[:12]))
        if view.last_step:
            lines.append("Last step: " + view.last_step)
        return "\n\n".join(lines)
