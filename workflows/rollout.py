"""The rollout workflow: one per PodCliqueSet (by UID), the single owner of "one PCS replica at a time" (DESIGN §4.9).

Each round it reads the whole PCS (one activity), then:
- a new generation hash starts a rollout, or retargets the running one: the replica whose turn it is keeps its turn
  with the new hash (pods already at it are not recreated, grove.rollout only recreates outdated units);
- the current turn ends when the replica reports it done (or the read shows it updated and Ready);
- with no turn running, not paused and not halted, the next replica not yet updated gets the turn (unavailable
  ones first, then by index: grove.rollout.next_replica), by a `rollout_turn` signal to its replica workflow;
- a replica reporting its progressDeadline exceeded halts the rollout (condition, Event) until a new spec or a
  `resume`;
- the PCS status mirror (updatedReplicas, currentGenerationHash, updateProgress, UpdateInProgress condition).
OnDelete: no turns; a deleted pod comes back with the newest template through the replica's materialisation.
Everything it decides is in its state, carried across continue-as-new; every step is in its log and history.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from grove import names
    from grove.rollout import next_replica
    from workflows.contract import (
        ACTIVITY_HEARTBEAT_TIMEOUT,
        ACTIVITY_HEARTBEATS_PATCH,
        MIRROR_ROLLOUT_STATUS,
        OBSERVE_ROLLOUT,
        OBSERVE_ROLLOUT_CACHED,
        PAUSE,
        PCS_CHANGED_SIGNAL,
        RECORD_ROLLOUT_EVENT,
        RESUME,
        ROLLOUT_REPORT_SIGNAL,
        ROLLOUT_TURN_SIGNAL,
        ROLLOUT_WORKFLOW,
        STATUS_QUERY,
        replica_workflow_id,
    )
    from workflows.rollout_messages import (
        RolloutControl,
        RolloutControlResult,
        RolloutEvent,
        RolloutInput,
        RolloutSnapshot,
        RolloutState,
        RolloutStatus,
        RolloutStatusMirror,
        RolloutStep,
        RolloutTurn,
        TurnReport,
    )
    from workflows.signals import history_calls_for_handover

# While idle, a replica that is not updated (its pods are being recreated after a gang termination or a lost node)
# makes the next read come after active_resync rather than idle_resync, so updatedReplicas and updateProgress follow
# the replica back within seconds. A running workflow written before this waited idle_resync (found by the fault
# run: a PCS showed updatedReplicas 0 of 1 for minutes after a termination).
RESYNC_NOT_UPDATED_PATCH = "rollout-resync-not-updated"
# A round that only the idle timer woke (nothing signalled, no turn running, nothing to follow closely) reads the
# worker's watch cache instead of the apiserver: a settled PCS cost four requests every idle_resync (2.4 per replica
# per hour at ten replicas a PCS, more than the rest of an idle fleet together). A round a signal woke, an active
# one, and any read that would end the workflow still read the apiserver.
IDLE_CACHED_PATCH = "rollout-idle-cached"
# A round that only the active-resync timer woke while no turn runs (a replica not updated yet: a new PCS whose pods
# are still starting, a replica recreated after a gang termination) reads the watch cache too. At 1,000 replicas of
# 17 pods those reads, every pod of the PCS every 30 s until its replicas are available, were most of the JSON the
# worker decoded (34% of its profile samples were JSON decoding). Where the cached read shows a turn to grant (a new
# generation, an outdated replica), the round reads the apiserver again and decides on that read: turns are still
# granted on fresh reads.
RESYNC_CACHED_PATCH = "rollout-resync-cached"

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
TIMEOUT = timedelta(seconds=60)
LOG_KEPT = 40


@workflow.defn(name=ROLLOUT_WORKFLOW)
class RolloutWorkflow:
    @workflow.init
    def __init__(self, input: RolloutInput) -> None:
        self.input = input
        self.ref = input.ref
        self.state = input.state or RolloutState()
        self._woken = True
        self._reports: list[TurnReport] = []
        self._snapshot: RolloutSnapshot | None = None
        self._grant_failed = False
        self._resend = False  # a pause or resume the replica whose turn it is has not been told of yet
        self._idle_timer_round = False  # the last wait was idle and ended by its timer alone
        self._resync_timer_round = False  # the last wait followed a replica not updated, no turn ran, timer ended it
        self._heartbeat_timeout: timedelta | None = None  # decided once per run, by ACTIVITY_HEARTBEATS_PATCH

    @workflow.run
    async def run(self, input: RolloutInput) -> str:
        if workflow.patched(ACTIVITY_HEARTBEATS_PATCH):
            self._heartbeat_timeout = ACTIVITY_HEARTBEAT_TIMEOUT
        while True:
            if history_calls_for_handover(input.history_event_limit) is not None:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(input.model_copy(update={"state": self.state}))
            self._woken = False
            snapshot = await self._observe()
            if snapshot is not None:
                if snapshot.pcs_state != "Present":
                    workflow.logger.info("rollout workflow completes: PodCliqueSet %s", snapshot.pcs_state)
                    return snapshot.pcs_state
                self._snapshot = snapshot  # the status query answers from the read the decisions rest on
                if snapshot.valid:
                    await self._decide(snapshot)
                    await self._mirror(snapshot)
            self._render()
            turn_running = self.state.current is not None or self._grant_failed or snapshot is None
            active = turn_running
            if (not active and snapshot is not None and snapshot.valid and snapshot.strategy != names.STRATEGY_ON_DELETE
                    and any(not r.updated for r in snapshot.replicas)
                    and workflow.patched(RESYNC_NOT_UPDATED_PATCH)):
                active = True
            timeout = input.active_resync if active else input.idle_resync
            self._idle_timer_round = self._resync_timer_round = False
            try:
                await workflow.wait_condition(lambda: self._woken or bool(self._reports), timeout=timeout,
                                              timeout_summary="rollout resync")
            except TimeoutError:
                self._idle_timer_round = not active
                self._resync_timer_round = active and not turn_running

    # --- one round --------------------------------------------------------------------------------------------
    async def _observe(self) -> RolloutSnapshot | None:
        if self._idle_timer_round and workflow.patched(IDLE_CACHED_PATCH):
            return await self._read(cached="idle")
        if self._resync_timer_round and workflow.patched(RESYNC_CACHED_PATCH):
            snapshot = await self._read(cached="resync")
            if snapshot is None or not self._turn_to_grant(snapshot):
                return snapshot
        return await self._read()

    def _turn_to_grant(self, snap: RolloutSnapshot) -> bool:
        """Whether deciding on this read could start a rollout or grant a turn."""
        return snap.generation_hash != self.state.target_hash or any(r.outdated for r in snap.replicas)

    async def _read(self, cached: str = "") -> RolloutSnapshot | None:
        """The PCS read for a round: from the apiserver, or (`cached` says why) from the worker's watch cache."""
        try:
            result: RolloutSnapshot = await workflow.execute_activity(
                OBSERVE_ROLLOUT_CACHED if cached else OBSERVE_ROLLOUT, self.ref, result_type=RolloutSnapshot,
                start_to_close_timeout=TIMEOUT, heartbeat_timeout=self._heartbeat_timeout, retry_policy=RETRY,
                summary=f"read {self.ref} for its rollout" + (f" ({cached}: from the watch cache)" if cached else ""))
            return result
        except ActivityError as err:
            workflow.logger.error("observe_rollout failed: %s", err.cause or err)
            return None

    async def _decide(self, snap: RolloutSnapshot) -> None:
        now = workflow.now()
        reports, self._reports = self._reports, []
        state = self.state
        if snap.generation_hash != state.target_hash:
            first = not state.target_hash
            pending = [r.index for r in snap.replicas if r.outdated]
            if first and not pending:
                self._set(target_hash=snap.generation_hash)  # adopted: everything already runs this generation
            else:
                what = (f"rollout to generation {snap.generation_hash}"
                        + (f" (was {state.target_hash})" if state.target_hash else "")
                        + (f"; replica {state.current} keeps its turn, retargeted" if state.current is not None
                           else ""))
                self._set(target_hash=snap.generation_hash, halted="", done_replicas=(),
                          started_at=state.started_at if state.started_at and not state.ended_at else now,
                          ended_at=None)
                self._log(what)
                if snap.strategy != names.STRATEGY_ON_DELETE:
                    await self._event(names.EVENT_ROLLOUT_STARTED, what)
                if state.current is not None:
                    await self._grant(state.current, "retarget")
        if self._resend and self.state.current is not None and snap.strategy != names.STRATEGY_ON_DELETE:
            self._resend = False
            await self._grant(self.state.current, "pause/resume")  # a fresh turn: also restarts a halted one
        if snap.strategy == names.STRATEGY_ON_DELETE:
            if self.state.current is not None:
                await self._revoke(self.state.current, "strategy is OnDelete")
            if self.state.ended_at is None and self.state.started_at is not None:
                self._set(ended_at=now)  # as Grove: nothing is pending on us; pods update when deleted
            return
        for report in reports:
            self._take(report, snap)
        current = self.state.current
        if current is not None:
            replica = next((r for r in snap.replicas if r.index == current), None)
            if replica is None:
                self._log(f"replica {current} no longer wanted; its turn ends")
                self._set(current=None, current_since=None)
            elif replica.updated and not self.state.halted:
                self._finish(current, "read updated and Ready")
        if self.state.current is None and not self.state.paused and not self.state.halted:
            todo = snap.replicas
            chosen = next_replica(todo)
            if chosen is not None:
                self._set(current=chosen, current_since=now)
                self._log(f"replica {chosen}'s turn"
                          + (" (unavailable, so first)" if not next(r for r in todo if r.index == chosen).available
                             else ""))
                await self._grant(chosen, "turn")
            elif self.state.started_at is not None and self.state.ended_at is None:
                self._set(ended_at=now)
                self._log(f"rollout to {self.state.target_hash} complete: {len(snap.replicas)} replicas updated")
                await self._event(names.EVENT_ROLLOUT_COMPLETED,
                                  f"every replica runs generation {self.state.target_hash}")

    def _take(self, report: TurnReport, snap: RolloutSnapshot) -> None:
        if report.replica != self.state.current or report.generation_hash != self.state.target_hash:
            return  # about an older turn or target
        if report.seq != self.state.seq:
            return
        if report.outcome == "done":
            self._finish(report.replica, "reported done")
        elif report.outcome == "halted" and not self.state.halted:
            self._set(halted=f"replica {report.replica}: {report.message}")
            self._log(f"halted: replica {report.replica}: {report.message}")

    def _finish(self, replica: int, how: str) -> None:
        self._set(current=None, current_since=None,
                  done_replicas=tuple(sorted({*self.state.done_replicas, replica})))
        self._log(f"replica {replica} updated ({how})")

    async def _grant(self, replica: int, why: str) -> None:
        self._set(seq=self.state.seq + 1)
        turn = RolloutTurn(seq=self.state.seq, generation_hash=self.state.target_hash, granted_at=workflow.now(),
                           paused=self.state.paused)
        await self._send(replica, turn, why)

    async def _revoke(self, replica: int, why: str) -> None:
        self._set(seq=self.state.seq + 1)
        turn = RolloutTurn(seq=self.state.seq, generation_hash=self.state.target_hash, granted_at=workflow.now(),
                           revoked=True)
        await self._send(replica, turn, why)
        self._set(current=None, current_since=None)
        self._log(f"replica {replica}'s turn revoked: {why}")

    async def _send(self, replica: int, turn: RolloutTurn, why: str) -> None:
        handle = workflow.get_external_workflow_handle(
            replica_workflow_id(self.ref.namespace, self.ref.pcs, self.ref.pcs_uid, replica))
        try:
            await handle.signal(ROLLOUT_TURN_SIGNAL, turn)
            self._grant_failed = False
        except Exception as err:  # the replica workflow does not run (yet): granted again next round
            workflow.logger.warning("could not signal replica %d (%s): %s", replica, why, err)
            self._grant_failed = True
            if not turn.revoked:
                self._set(current=None, current_since=None)

    # --- status mirror, events, UI --------------------------------------------------------------------------
    async def _mirror(self, snap: RolloutSnapshot) -> None:
        state = self.state
        updated = sum(1 for r in snap.replicas if r.updated)
        if state.halted:
            condition = ("Unknown", names.REASON_PROGRESS_DEADLINE_EXCEEDED, state.halted)
            await self._announce_halt()
        elif state.started_at is not None and state.ended_at is None:
            reason = names.REASON_UPDATE_PAUSED if state.paused else names.REASON_UPDATING
            condition = ("True", reason, f"{updated} of {len(snap.replicas)} replicas updated"
                         + (f"; replica {state.current} updating" if state.current is not None else ""))
        else:
            condition = ("False", names.REASON_UPDATE_COMPLETE,
                         f"{updated} of {len(snap.replicas)} replicas run generation {snap.generation_hash}"
                         if snap.strategy != names.STRATEGY_ON_DELETE else
                         f"OnDelete: {updated} of {len(snap.replicas)} replicas run generation "
                         f"{snap.generation_hash}; pods update when deleted")
        progress: dict[str, Any] | None = None
        if state.started_at is not None:
            progress = {
                "updateStartedAt": _time(state.started_at),
                "updatedPodCliquesCount": snap.updated_pod_cliques,
                "totalPodCliquesCount": snap.total_pod_cliques,
                "updatedPodCliqueScalingGroupsCount": snap.updated_scaling_groups,
                "totalPodCliqueScalingGroupsCount": snap.total_scaling_groups,
            }
            if state.ended_at is not None:
                progress["updateEndedAt"] = _time(state.ended_at)
            if state.current is not None and state.current_since is not None:
                progress["currentlyUpdating"] = [{"replicaIndex": state.current,
                                                  "updateStartedAt": _time(state.current_since)}]
        request = RolloutStatusMirror(ref=self.ref, updated_replicas=updated, generation_hash=snap.generation_hash,
                                      update_progress=progress, condition_status=condition[0],
                                      condition_reason=condition[1], condition_message=condition[2])
        digest = hashlib.sha256(json.dumps(request.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
        if digest == state.mirrored:
            return
        try:
            await workflow.execute_activity(MIRROR_ROLLOUT_STATUS, request, result_type=bool,
                                            start_to_close_timeout=TIMEOUT, heartbeat_timeout=self._heartbeat_timeout,
                                            retry_policy=RETRY,
                                            summary=f"mirror rollout status: {condition[1]}")
            self._set(mirrored=digest)
        except ActivityError as err:
            workflow.logger.error("mirror_rollout_status failed: %s", err.cause or err)

    async def _announce_halt(self) -> None:
        key = f"halt:{self.state.target_hash}:{self.state.seq}"
        if self.state.announced != key:
            await self._event(names.EVENT_ROLLOUT_HALTED, f"rolling update halted: {self.state.halted}",
                              type="Warning")
            self._set(announced=key)

    async def _event(self, reason: str, message: str, type: str = "Normal") -> None:
        try:
            await workflow.execute_activity(RECORD_ROLLOUT_EVENT, RolloutEvent(ref=self.ref, reason=reason,
                                                                                 message=message, type=type),
                                            start_to_close_timeout=TIMEOUT, heartbeat_timeout=self._heartbeat_timeout,
                                            retry_policy=RETRY,
                                            summary=f"event {reason}")
        except ActivityError as err:
            workflow.logger.error("record_rollout_event failed: %s", err.cause or err)

    def _set(self, **changes: Any) -> None:
        self.state = self.state.model_copy(update=changes)

    def _log(self, what: str) -> None:
        workflow.logger.info("rollout %s: %s", self.ref, what)
        log = (*self.state.log, RolloutStep(at=workflow.now(), what=what[:300]))
        self._set(log=log[-LOG_KEPT:])

    def _render(self) -> None:
        s = self.status()
        head = [f"**{s.phase}** · strategy {s.strategy} · generation `{s.generation_hash or '-'}` · "
                f"{s.updated_replicas} of {len(s.replicas)} replicas updated"]
        if s.current is not None:
            head.append(f"Turn: replica {s.current}")
        if s.paused:
            head.append(f"**PAUSED**{': ' + s.pause_reason if s.pause_reason else ''}")
        if s.halted:
            head.append(f"**HALTED**: {s.halted}")
        table = ["| at | step |", "|---|---|", *(f"| {e.at:%H:%M:%S} | {e.what} |" for e in s.log[-10:])]
        workflow.set_current_details("\n\n".join(head) + ("\n\n" + "\n".join(table) if s.log else ""))

    # --- messages -------------------------------------------------------------------------------------------------
    @workflow.signal(name=ROLLOUT_REPORT_SIGNAL)
    def report(self, report: TurnReport) -> None:
        self._reports.append(report)

    @workflow.signal(name=PCS_CHANGED_SIGNAL)
    def pcs_changed(self) -> None:
        self._woken = True
        self._set(mirrored="")  # mirror again: another writer of the PCS status may have replaced our condition

    @workflow.signal(name=PAUSE)
    def pause_signal(self, request: RolloutControl | None = None) -> None:
        self._pause(request or RolloutControl())

    @workflow.signal(name=RESUME)
    def resume_signal(self) -> None:
        self._resume()

    @workflow.update(name=PAUSE)
    def pause_update(self, request: RolloutControl) -> RolloutControlResult:
        was = self.state.paused
        self._pause(request)
        return RolloutControlResult(accepted=True, message="already paused" if was else "rollout paused")

    @workflow.update(name=RESUME)
    def resume_update(self) -> RolloutControlResult:
        was, halted = self.state.paused, self.state.halted
        self._resume()
        message = ("rollout resumed" if was else "was not paused") + (f"; halt cleared ({halted})" if halted else "")
        return RolloutControlResult(accepted=True, message=message)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> RolloutStatus:
        s, snap = self.state, self._snapshot
        if snap is None:
            phase = "Pending"  # not read yet
        elif not snap.valid:
            phase = "Invalid"
        elif s.halted:
            phase = "Halted"
        elif s.paused:
            phase = "Paused"
        elif s.started_at is not None and s.ended_at is None:
            phase = "Rolling"
        elif s.started_at is not None:
            phase = "Complete"
        else:
            phase = "Idle"
        return RolloutStatus(
            ref=self.ref, strategy=snap.strategy if snap else "RollingRecreate", generation_hash=s.target_hash,
            phase=phase, current=s.current, current_since=s.current_since, paused=s.paused,
            pause_reason=s.pause_reason, halted=s.halted, started_at=s.started_at, ended_at=s.ended_at,
            updated_replicas=sum(1 for r in snap.replicas if r.updated) if snap else 0,
            replicas=snap.replicas if snap else (), log=s.log, problems=snap.problems if snap else (),
        )

    def _pause(self, request: RolloutControl) -> None:
        if not self.state.paused:
            self._log("paused" + (f": {request.reason}" if request.reason else ""))
        self._set(paused=True, pause_reason=request.reason)
        self._woken = self._resend = True

    def _resume(self) -> None:
        if self.state.paused or self.state.halted:
            self._log("resumed" + (" (halt cleared)" if self.state.halted else ""))
        self._set(paused=False, pause_reason="", halted="")
        self._woken = self._resend = True


def _time(value: Any) -> str:
    return str(value.strftime("%Y-%m-%dT%H:%M:%SZ"))
