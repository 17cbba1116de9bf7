"""The replica workflow: one durable workflow per PodCliqueSet replica (DESIGN §1, §4).

Each round: observe (one activity) → materialise what drifted → release the gates that may go → evaluate
availability → mirror status → carry out what is due → wait for a nudge, a control or the earliest
terminationDelay deadline (one durable timer). The memory that matters (was-available per PodClique incarnation,
breach starts, pause, the termination log) lives in workflow state, so a worker crash, a redeploy or
continue-as-new cannot reset a timer, forget availability or terminate twice.

The class keeps the loop and the Temporal handlers; each other concern is a deterministic helper of its own:
when to look again (workflows/nudges.py), pause/resume/force-terminate (workflows/controls.py), phase, search
attributes, status answer and UI (workflows/presentation.py), a rolling update turn (workflows/replica_rollout.py),
the message budget per run (workflows/signals.py).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from grove.evaluate import (
        ReplicaEvaluation,
        evaluate_replica,
        forget_healed,
        forget_terminated,
        remember_reached,
    )
    from grove.release import GateDecision, base_members, decide_releases, gangs_of_termination
    from grove.startup import StartupDecision, decide_starts
    from grove.termination import Scope, Termination
    from grove.topology import ReplicaTopology
    from workflows import controls, presentation
    from workflows.contract import (
        ACTIVITY_HEARTBEAT_TIMEOUT,
        ACTIVITY_HEARTBEATS_PATCH,
        DEADLINE_MEMO,
        DELETE_REPLICA,
        ENSURE_REPLICA,
        ENSURE_REPLICA_CACHED,
        ENSURE_REPLICA_RELEASING,
        FORCE_TERMINATE,
        LOCAL_ACTIVITIES,
        LOCAL_ACTIVITIES_PATCH,
        LOCAL_ENSURES,
        LOCAL_RELEASES,
        MIRROR_STATUS,
        NUDGE_SIGNAL,
        OBSERVE_REPLICA,
        OBSERVE_REPLICA_CACHED,
        PAUSE,
        RECORD_EVENT,
        RELEASE_GATES,
        RELEASE_STARTUP,
        REPLICA_WORKFLOW,
        RESUME,
        ROLLOUT_TURN_SIGNAL,
        STATUS_QUERY,
        TERMINATE_GANG,
    )
    from workflows.controls import ControlQueue
    from workflows.messages import (
        BreachRecheck,
        CachedObserveRequest,
        ControlResult,
        DeadlineMemo,
        DeleteReplicaResult,
        EnsureRequest,
        EnsureResult,
        EventRequest,
        ForceTerminateRequest,
        MirrorRequest,
        MirrorWithRead,
        Nudge,
        PauseRequest,
        PcsState,
        Phase,
        ReleaseRequest,
        ReleaseResult,
        ReplicaInput,
        ReplicaOutcome,
        ReplicaRef,
        ReplicaSnapshot,
        ReplicaState,
        ReplicaStatus,
        StartupRequest,
        StartupResult,
        TerminateRequest,
        TerminateResult,
        TerminationRecord,
    )
    from workflows.nudges import (
        NUDGED_FLOOR_PATCH,
        TIMED_NUDGES_PATCH,
        UNVERSIONED_COUNTED_PATCH,
        VERSIONED_NUDGES_PATCH,
        Nudges,
    )
    from workflows.patches import (
        INPUT_BASELINE_13,
        INPUT_BASELINE_14,
        INPUT_BASELINE_15,
        INPUT_BASELINE_16,
        INPUT_BASELINE_17,
        NEWEST_INPUT_BASELINE,
        REPLICA_BASELINE_2_PATCH,
        REPLICA_BASELINE_3_PATCH,
        REPLICA_BASELINE_4_PATCH,
        REPLICA_BASELINE_5_PATCH,
        REPLICA_BASELINE_6_PATCH,
        REPLICA_BASELINE_7_PATCH,
        REPLICA_BASELINE_8_PATCH,
        REPLICA_BASELINE_9_PATCH,
        REPLICA_BASELINE_10_PATCH,
        REPLICA_BASELINE_11_PATCH,
        REPLICA_BASELINE_12_PATCH,
        REPLICA_BASELINE_PATCH,
        PatchSet,
    )
    from workflows.replica_rollout import ROLLOUT_PATCH, ReplicaRollout
    from workflows.rollout_messages import RolloutTurn
    from workflows.signals import (
        COUNTED_EVENTS_RULE,
        EVENTS_PER_ACTIVITY,
        EVENTS_PER_LOCAL_ACTIVITY,
        EVENTS_PER_SIGNAL,
        EVENTS_PER_TIMER_CANCELED,
        EVENTS_PER_TIMER_FIRED,
        EVENTS_PER_TIMER_STARTED,
        EVENTS_PER_UPDATE,
        EVENTS_PER_UPSERT,
        HISTORY_CAP_PATCH,
        QUIET_HANDOVER_PATCH,
        ROUND_START_RULE,
        SIGNAL_BUDGET_PATCH,
        EventTally,
        Received,
        history_calls_for_handover,
        quiet_calls_for_handover,
    )

ACTIVITY_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                             maximum_interval=timedelta(seconds=30))
ACTIVITY_TIMEOUT = timedelta(seconds=60)
# A local activity holds its workflow task open while it runs and while it retries within the threshold; queries
# and updates meanwhile wait for the SDK's workflow-task heartbeat (about 7 s, measured). So an attempt gets at most
# 10 s, and a retry more than 2 s away waits on a workflow timer instead, with the task closed and queries answered.
LOCAL_ACTIVITY_TIMEOUT = timedelta(seconds=10)
LOCAL_RETRY_THRESHOLD = timedelta(seconds=2)
RETRY_AFTER_FAILURE = timedelta(seconds=30)
TERMINATION_LOG_KEPT = 50
# Patches: each names one change to the commands this workflow issues (docs/architecture.md, "Upgrading the workflow safely").
# Also: TIMED_NUDGES_PATCH, VERSIONED_NUDGES_PATCH, NUDGED_FLOOR_PATCH and UNVERSIONED_COUNTED_PATCH
# (workflows/nudges.py), SIGNAL_BUDGET_PATCH and QUIET_HANDOVER_PATCH (workflows/signals.py), ROLLOUT_PATCH (workflows/replica_rollout.py).
BREACH_EVENTS_PATCH = "breach-events"
# Startup order (DESIGN §4.10): pods waiting for the cliques they start after are started by a new activity.
STARTUP_ORDER_PATCH = "startup-order"
# Paused or held (invalid spec): a round when the earliest deadline passes, so status lists it as due and held.
HELD_DEADLINES_PATCH = "held-deadlines"
# A scaled release carries what the base gang needs; the activity releases only if a read made then agrees.
SCALED_RELEASE_RECHECK_PATCH = "scaled-release-recheck"
# Routine rounds observe from the worker's watch cache (issue 17); a destructive decision is taken only on a fresh
# read from the apiserver. Decided once per run, at its start.
CACHED_OBSERVE_PATCH = "cached-observe"
# Every run does one round before it hands over, even if its first task is already past a hand-over threshold (an
# unpaced signal storm): otherwise runs could follow one another without observing, and a breach go unseen.
ROUND_BEFORE_HANDOVER_PATCH = "round-before-handover"
# A run hands over in a later workflow task than one that accepted an update: the server refuses a task that completes
# the run while new events came in meanwhile (under a storm of signals, often), and an update accepted in that task is
# lost with it; the caller gets "workflow task failure" (seen in CI, the signal-storm test). A short timer opens the
# next task. Asked only where it applies, so a history without it replays as before.
UPDATE_HANDOVER_PATCH = "handover-after-update-task"
HANDOVER_AFTER_UPDATE = timedelta(milliseconds=100)
# Deadlines are judged at a decision time that moves only where workflow time is the same in every replay: when a run
# starts, when a (non-local) activity returns, and when a wait that blocked ends; and a wait for a deadline always
# starts a timer (at least MIN_TIMER). Workflow time right after a local activity is not replay-safe: when one outlasts
# its workflow task (a heartbeat task follows), the first execution saw one time and a replay another (fault run seed
# 14, round 35: a PCSG replica's deadline due in the first and not yet in the replay, "No command scheduled for event
# ActivityTaskScheduled", and the replica stopped).
DECISION_TIME_PATCH = "decision-time"
MIN_TIMER = timedelta(milliseconds=1)
# One safety-resync timer runs across waits, instead of a timer started for each wait and cancelled when a nudge ends
# it: two history events less per round woken by a nudge (issue 17). It fires at most safety_resync after it was
# started, then the next wait starts another: the replica is looked at at least that often, as before.
ONE_SAFETY_TIMER_PATCH = "one-safety-timer"
# A deadline (termination, rollout progressDeadline) is due only once a durable timer for it has fired: an event in
# the history, the same in every replay. Workflow time is not: in a replay, a workflow task followed by the
# heartbeat tasks of a local activity that outlasted it runs at the time of the last of them (fault run seed 13 on
# b8a0e27, round 2: the first execution judged a breach not yet due, the replay due, and read the apiserver where the
# history has a read from the watch cache; "Missing associated machine for LocalActivity(22)"). Workflow time still
# stamps when a breach or progress began; a replay may stamp it later, which moves only a timer's length.
TIMER_JUDGED_PATCH = "timer-judged-deadlines"
# The decision time is never earlier than the moment the round's read was taken (the activity's clock, recorded in
# the history with its result, so the same in every replay). It used to move only where a wait blocked or a regular
# activity returned, so rounds of local activities kept an old one. Two histories showed it: a round in progress
# when its worker was killed, re-run by the next worker 10 s later (its reads new, its decision time the round's
# start); and a worker that took a workflow over after a SIGKILL and ran its first round at the time of the last
# task the dead worker completed, though a replay of the same history ran it at the new task's (the wait had ended
# in that old task's activation, with the new nudges in it). Each stamped a breach it had just read 1-3 s before the
# pod broke (tests/e2e/test_crash_recovery.py with relisted nudges carrying versions; the fault runs now check it).
# Stamped at the read, a breach never begins before the observation that showed it; a worker clock ahead of
# Temporal's makes it later by that much, never earlier.
READ_TIME_FLOOR_PATCH = "decision-time-after-read"
# Materialising releases the base gang's gates in the same activity (ensure_replica_releasing), on the pods the same
# decision would release on its result, where this round used to schedule release_gates after it: a new replica's
# base gang reaches the scheduler one workflow task and one activity sooner (issue 17). Asked where a round first
# materialises; in a run begun under REPLICA_BASELINE_7 it records no marker of its own.
ENSURE_RELEASES_BASE_PATCH = "ensure-releases-base"
# The round goes on with the plan materialising worked to, where its own read found another than the round's read:
# the spec or a scaling count changed in between (an HPA scaled a PCSG back between the two reads, fault run seed 7
# in CI on 41eefa7). The round used to evaluate on the older plan, so it waited for PodCliques materialising never
# made (phase Creating), or left a new scaled gang gated, while its read answered the nudge for that very change:
# nothing woke it until the next change, 150 s later there. Asked only where the two plans differ.
ENSURE_TOPOLOGY_PATCH = "topology-from-ensure"
# Gate releases (release_gates) and startup releases (release_startup) run as local activities, like the cached
# read and the mirror: one marker each instead of three activity events and a workflow task for the result, and the
# nudges that arrive while one runs wait for one workflow task after it rather than each waking a task that can only
# record it (a 17-pod replica spent a quarter of its history on those, issue 17). Decided when a run starts; in a run
# begun under REPLICA_BASELINE_8 it records no marker of its own.
LOCAL_RELEASES_PATCH = "local-releases"
# Where a round releases base pods and scaled gangs together (the base gang's pods past minAvailable wait for it to be
# scheduled, like the scaled gangs), one release_gates does both, the scaled gangs first: one marker instead of two,
# and the surplus pods bind once no gate of the replica is left, so their bindings wake no round (issue 17: a 17-pod
# replica of four frontends and five decoders spent a round of six events on them).
ONE_RELEASE_PATCH = "one-release-per-round"
# A round's read from the watch cache also writes the status the round will mirror (observe_replica_cached is sent the
# memory and digests the evaluation needs, and records what it wrote): one local activity and one marker per round
# instead of two, and a workflow task that waits on one call to kube-apiserver's status endpoints, not two in a row
# (issue 17). The round still evaluates and mirrors itself whatever it computes differently. Decided once per run.
MIRROR_WITH_READ_PATCH = "mirror-with-read"
# Materialising (ensure_replica and its cached and releasing forms) runs as a local activity too: one marker where an
# activity left three events and a workflow task of three more for its result, and a new replica's first round is one
# workflow task with its base gang released in it, not two with a trip through the activity queue between them. Each
# deletion it makes is still decided on a fresh read inside the activity. A worker lost while it runs leaves the
# workflow task to time out and the next worker to run it again at once (it is idempotent), where an activity waited
# for its heartbeat timeout (issue 17). Decided once per run, at its start.
LOCAL_ENSURE_PATCH = "local-ensure"
# Materialising, like a round's read (MIRROR_WITH_READ_PATCH), is sent what the evaluation needs and writes the status
# the round will mirror on the snapshot it leaves: a new replica's first round is two local activities, not three
# (one from baseline 15 on: FIRST_READ_MATERIALISES_RULE).
# The round mirrors what it computes differently (a gate released after it, a rolling update turn). Decided once per
# run, with LOCAL_ENSURE_PATCH.
MIRROR_WITH_ENSURE_PATCH = "mirror-with-ensure"
# The replica's pending terminationDelay deadlines (how many, the earliest) are kept in its workflow's memo
# (contract.DEADLINE_MEMO): the fleet gauges read them from one visibility listing, where they queried the status of
# every Breached or Terminating replica every 15 s, a workflow task each (67 a second with 1,000 replicas breached,
# issue 17). One event (WorkflowPropertiesModified) where the deadlines change, in the workflow task that records
# the change. Asked only where the memo is written, so a history without it replays as before.
DEADLINE_MEMO_PATCH = "deadline-memo"
# A new replica's first round reads by materialising: the round's read and materialising are one local activity
# (ensure_replica_releasing with first_read) where they were two in a row, the first finding only that nothing exists
# yet. Where the read shows the round would not materialise (the PodCliqueSet gone, its spec held or invalid, this
# replica not wanted) the activity changes nothing and the round decides on that read as on any other. One marker
# and one local activity less for every new replica (issue 17: 14 history events of a one-pod replica from created
# to Available, 13 with it). Not a patch but a rule of input baseline 15 (workflows/patches.py): runs of earlier
# baselines read first, as recorded.
FIRST_READ_MATERIALISES_RULE = "first-read-materialises"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Every patch above and in the modules named: a run begun under REPLICA_BASELINE_PATCH has them all, with one marker
# (workflows/patches.py). A patch added later stays out of this set until a new baseline takes it in.
REPLICA_BASELINE = frozenset({
    TIMED_NUDGES_PATCH, VERSIONED_NUDGES_PATCH, SIGNAL_BUDGET_PATCH, HISTORY_CAP_PATCH, ROLLOUT_PATCH,
    BREACH_EVENTS_PATCH, STARTUP_ORDER_PATCH, HELD_DEADLINES_PATCH, SCALED_RELEASE_RECHECK_PATCH,
    CACHED_OBSERVE_PATCH, ACTIVITY_HEARTBEATS_PATCH, LOCAL_ACTIVITIES_PATCH, ROUND_BEFORE_HANDOVER_PATCH,
})
REPLICA_BASELINE_2 = REPLICA_BASELINE | {DECISION_TIME_PATCH}
REPLICA_BASELINE_3 = REPLICA_BASELINE_2 | {ONE_SAFETY_TIMER_PATCH, TIMER_JUDGED_PATCH}
REPLICA_BASELINE_4 = REPLICA_BASELINE_3 | {NUDGED_FLOOR_PATCH}
REPLICA_BASELINE_5 = REPLICA_BASELINE_4 | {UNVERSIONED_COUNTED_PATCH}
REPLICA_BASELINE_6 = REPLICA_BASELINE_5 | {READ_TIME_FLOOR_PATCH}
# Each baseline marker and the patches it stands for, newest first: the order a run asks them in (new runs record
# the first); worker/history_activities.patches_in reads histories by the same table.
REPLICA_BASELINE_7 = REPLICA_BASELINE_6 | {ENSURE_RELEASES_BASE_PATCH}
REPLICA_BASELINE_8 = REPLICA_BASELINE_7 | {LOCAL_RELEASES_PATCH, ENSURE_TOPOLOGY_PATCH}
REPLICA_BASELINE_9 = REPLICA_BASELINE_8 | {ONE_RELEASE_PATCH}
REPLICA_BASELINE_10 = REPLICA_BASELINE_9 | {MIRROR_WITH_READ_PATCH, UPDATE_HANDOVER_PATCH}
REPLICA_BASELINE_11 = REPLICA_BASELINE_10 | {LOCAL_ENSURE_PATCH, MIRROR_WITH_ENSURE_PATCH}
REPLICA_BASELINE_12 = REPLICA_BASELINE_11 | {DEADLINE_MEMO_PATCH}
# Baselines from 13 on are numbers in the run's input, not markers (workflows/patches.py). Baseline 13 takes in no
# new patch: it is baseline 12 without the marker. The newest is what this release writes into the runs it begins.
REPLICA_BASELINE_13 = REPLICA_BASELINE_12
# Baseline 14 takes in a rule, not a patch: hand-overs judged on the history length the run counts (workflows/signals.py).
REPLICA_BASELINE_14 = REPLICA_BASELINE_13 | {COUNTED_EVENTS_RULE}
# Baseline 15 takes in another rule: a new replica's first read materialises it (FIRST_READ_MATERIALISES_RULE).
REPLICA_BASELINE_15 = REPLICA_BASELINE_14 | {FIRST_READ_MATERIALISES_RULE}
# Baseline 16: a hand-over where a round ends is judged as of the round's start (ROUND_START_RULE, workflows/signals.py).
REPLICA_BASELINE_16 = REPLICA_BASELINE_15 | {ROUND_START_RULE}
# Baseline 17 takes in the last patch asked where a run decides, QUIET_HANDOVER_PATCH (workflows/signals.py): a
# replay answers `patched` from the markers of the task it is replaying, and the code that decides a quiet hand-over
# can run one task later live than in a replay (fault run seed 7: tests/fixtures/incidents/README.md).
REPLICA_BASELINE_17 = REPLICA_BASELINE_16 | {QUIET_HANDOVER_PATCH}
RECORDED_BASELINES = {INPUT_BASELINE_13: REPLICA_BASELINE_13, INPUT_BASELINE_14: REPLICA_BASELINE_14,
                      INPUT_BASELINE_15: REPLICA_BASELINE_15, INPUT_BASELINE_16: REPLICA_BASELINE_16,
                      INPUT_BASELINE_17: REPLICA_BASELINE_17}
REPLICA_BASELINES = ((REPLICA_BASELINE_12_PATCH, REPLICA_BASELINE_12), (REPLICA_BASELINE_11_PATCH, REPLICA_BASELINE_11),
                     (REPLICA_BASELINE_10_PATCH, REPLICA_BASELINE_10), (REPLICA_BASELINE_9_PATCH, REPLICA_BASELINE_9), (REPLICA_BASELINE_8_PATCH, REPLICA_BASELINE_8),
                     (REPLICA_BASELINE_7_PATCH, REPLICA_BASELINE_7), (REPLICA_BASELINE_6_PATCH, REPLICA_BASELINE_6),
                     (REPLICA_BASELINE_5_PATCH, REPLICA_BASELINE_5), (REPLICA_BASELINE_4_PATCH, REPLICA_BASELINE_4),
                     (REPLICA_BASELINE_3_PATCH, REPLICA_BASELINE_3), (REPLICA_BASELINE_2_PATCH, REPLICA_BASELINE_2),
                     (REPLICA_BASELINE_PATCH, REPLICA_BASELINE))


class _Failed(Exception):
    """An activity failed for good (non-retryable); the round is abandoned and retried later."""


@dataclasses.dataclass
class _RoundStart:
    """What the run held when its current round began: a hand-over where the round ends is judged on it
    (ROUND_START_RULE), not on messages taken meanwhile. `nudges` is a copy that takes the round's own reads."""

    messages: int  # EventTally.messages
    received: Received
    nudges: Nudges
    paused: bool
    rollout_active: bool
    turns_ended: int  # ReplicaRollout.turns_ended: a turn the round itself ends is over at the round's end
    queued: bool


@workflow.defn(name=REPLICA_WORKFLOW)
class ReplicaWorkflow:
    @workflow.init
    def __init__(self, input: ReplicaInput) -> None:
        self.input = input
        self.ref = input.ref
        # Everything that must survive continue-as-new lives in this one object, carried whole (a field added to
        # ReplicaState is carried without touching this class).
        self.state = input.carry.model_copy(deep=True) if input.carry is not None else ReplicaState()
        self._patched = PatchSet(*REPLICA_BASELINES, recorded=RECORDED_BASELINES)  # workflows/patches.py
        self._rollout = ReplicaRollout(input.ref, self.state, self._patched)  # acts on the rolling update turn
        self._nudges = Nudges()  # when to look again (workflows/nudges.py); what it carries is in self.state.nudges
        # PodCliques the watcher saw at minAvailable (Nudge.reached), for the next round's evaluation. Not carried
        # across continue-as-new: the watcher sends the replica's whole set with every nudge.
        self._reached: dict[str, str] = {}
        self._controls = ControlQueue()  # queued force-terminate requests and rejections (workflows/controls.py)
        self._snapshot: ReplicaSnapshot | None = None
        self._evaluation: ReplicaEvaluation | None = None
        self._gates: GateDecision | None = None
        self._startup: StartupDecision | None = None
        self._problems: tuple[str, ...] = ()
        self._held = False  # invalid spec: create nothing, delete nothing
        self._retry_after: timedelta | None = None
        self._search = presentation.SearchAttributeMirror()
        self._received = Received()  # messages this run received (Temporal's caps are per run)
        self._cached_reads = False  # decided once per run, by CACHED_OBSERVE_PATCH
        self._heartbeat_timeout: timedelta | None = None  # decided once per run, by ACTIVITY_HEARTBEATS_PATCH
        self._local_activities = False  # decided once per run, by LOCAL_ACTIVITIES_PATCH
        self._local_releases = False  # and LOCAL_RELEASES_PATCH
        self._local_ensure = False  # and LOCAL_ENSURE_PATCH
        self._ensure_mirrors = False  # and MIRROR_WITH_ENSURE_PATCH
        self._rounds_begun = 0  # rounds this run has begun (ROUND_BEFORE_HANDOVER_PATCH)
        self._read_once = False  # this run has read at least once (FIRST_READ_MATERIALISES_RULE)
        self._update_task = -1  # the history length at the start of the last workflow task that took an update
        self._fresh_next = False  # the next round reads the apiserver: a destructive decision waits on it
        self._stable_time = False  # decided once per run, by DECISION_TIME_PATCH
        # Workflow time as of the last replay-safe point (see the patch). Not strictly safe where the task then runs a
        # local activity that outlasts it: a replay runs the heartbeat tasks that follow as one, at the time of the
        # last (COUNTED_EVENTS_RULE in workflows/signals.py).
        self._decision_time: datetime | None = None
        self._tally = EventTally()  # this run's history length as it counts it (COUNTED_EVENTS_RULE)
        self._updates_judged = 0  # updates taken before the last check for a hand-over (COUNTED_EVENTS_RULE)
        self._one_safety_timer = False  # decided once per run, by ONE_SAFETY_TIMER_PATCH
        self._timer_judged = False  # decided once per run, by TIMER_JUDGED_PATCH
        self._read_time_floor = False  # decided once per run, by READ_TIME_FLOOR_PATCH
        self._read_mirrors = False  # decided once per run, by MIRROR_WITH_READ_PATCH
        self._safety_timer: asyncio.Task[None] | None = None  # the running safety-resync timer (that patch)
        self._safety_fired = False
        self._round_start: _RoundStart | None = None  # kept under ROUND_START_RULE, for the round under way
        self._round_end_reason: str | None = None  # a hand-over judged where the last round ended (that rule)

    # --- main loop -------------------------------------------------------------------------------------------------
    @workflow.run
    async def run(self, input: ReplicaInput) -> ReplicaOutcome:
        self._patched.decide(input.baseline)  # first: in a run under a baseline, no other patch records a marker
        self._nudges.decide_timed(self._patched)
        # What the previous run was nudged about and had not read (empty for a first run, or one begun by a release
        # that carried nothing): an activity input and a carried field, no command of a recorded run changes.
        self._fresh_next = self._nudges.resume(self.state.nudges)
        self._cached_reads = self._patched(CACHED_OBSERVE_PATCH)
        self._heartbeat_timeout = ACTIVITY_HEARTBEAT_TIMEOUT if self._patched(ACTIVITY_HEARTBEATS_PATCH) else None
        self._local_activities = self._patched(LOCAL_ACTIVITIES_PATCH)
        self._local_releases = self._local_activities and self._patched(LOCAL_RELEASES_PATCH)
        self._local_ensure = self._local_releases and self._patched(LOCAL_ENSURE_PATCH)
        self._stable_time = self._patched(DECISION_TIME_PATCH)
        self._one_safety_timer = self._patched(ONE_SAFETY_TIMER_PATCH)
        self._timer_judged = self._patched(TIMER_JUDGED_PATCH)
        self._read_time_floor = self._patched(READ_TIME_FLOOR_PATCH)
        # The read evaluates as the round will: only where the round decides at a replay-safe time floored at the read.
        self._read_mirrors = (self._stable_time and self._timer_judged and self._read_time_floor
                              and self._patched(MIRROR_WITH_READ_PATCH))
        self._ensure_mirrors = self._read_mirrors and self._local_ensure and self._patched(MIRROR_WITH_ENSURE_PATCH)
        self._decision_time = workflow.now()
        round_start_rule = self._patched.covers(ROUND_START_RULE)
        while True:
            # Where the last round ended in a hand-over, that judgement stands: judged again here, it would count
            # what came in meanwhile, which a replay may not have delivered yet (ROUND_START_RULE).
            reason = self._round_end_reason if self._round_end_reason is not None else self._handover_reason()
            self._round_end_reason = None
            if reason is not None and not self._rounds_begun and self._patched(ROUND_BEFORE_HANDOVER_PATCH):
                # This run has not looked yet: under a storm of signals a run's first task can already be past the
                # history cap, and handing over at once would start the next run in the same state: runs could
                # follow one another without ever observing. One round first.
                workflow.logger.info("continue-as-new after this run's first round: %s", reason)
                reason = None
            if reason is not None:
                workflow.logger.info("continue-as-new: %s", reason)
                # A force_terminate update waits for the main loop to act on its request, so waiting for every
                # handler to finish would wait forever while one is queued: serve queued requests first, then hand
                # over (nothing queued is ever dropped by continue-as-new).
                def settled() -> bool:
                    return workflow.all_handlers_finished() or self._controls.queued()

                await workflow.wait_condition(settled)
                while (not self._controls.queued() and self._took_update_this_task()
                       and self._patched(UPDATE_HANDOVER_PATCH)):
                    self._updates_judged = self._received.updates
                    self._tally.add(EVENTS_PER_TIMER_STARTED)
                    await workflow.sleep(HANDOVER_AFTER_UPDATE, summary="hand over after the task that took an update")
                    self._tally.add(EVENTS_PER_TIMER_FIRED)
                    await workflow.wait_condition(settled)
                if not self._controls.queued():
                    workflow.continue_as_new(self._next_input())
            self._nudges.look_again = False
            self._retry_after = None
            self._rounds_begun += 1
            self._updates_judged = self._received.updates
            if round_start_rule:
                self._round_start = _RoundStart(
                    messages=self._tally.messages, received=dataclasses.replace(self._received),
                    nudges=copy.deepcopy(self._nudges), paused=self.state.paused,
                    rollout_active=self._rollout.active, turns_ended=self._rollout.turns_ended,
                    queued=bool(self._controls.queued()))
            try:
                outcome = await self._round()
            except _Failed:
                outcome = None
                self._retry_after = RETRY_AFTER_FAILURE
            if outcome is not None:
                self._controls.reject_all("the replica workflow has completed")
                self._set_phase(outcome.phase)
                self._render()
                return outcome
            self._render()
            if self._retry_after is None:
                reason = self._handover_reason(at_round_end=True)
                if reason is not None:
                    if round_start_rule:
                        self._round_end_reason = reason
                    continue  # hand over now (top of the loop), not after a wait that may last a terminationDelay
            await self._wait()

    async def _round(self) -> ReplicaOutcome | None:
        outcome = await self._round_on_a_read()
        if outcome is None and self._fresh_next:
            # That round read the cache and found something destructive due: decide it now, on a fresh read (not in
            # a later round: a continue-as-new in between would start the next run on the cache again).
            outcome = await self._round_on_a_read()
        return outcome

    async def _round_on_a_read(self) -> ReplicaOutcome | None:
        snapshot = await (self._read_materialising() if self._materialises_on_read() else self._observe())
        self._read_once = True
        if snapshot.pcs_state is not PcsState.PRESENT:
            return self._outcome(Phase.DELETED, f"PodCliqueSet {snapshot.pcs_state.value.lower()}; objects go "
                                                "away through owner references")
        if snapshot.valid and self.ref.replica >= snapshot.wanted_replicas:  # an invalid spec scales nothing in
            result = await self._activity(DELETE_REPLICA, self.ref, DeleteReplicaResult,
                                          f"scale in: replica {self.ref.replica} no longer wanted")
            if not result.skipped_reason:
                return self._outcome(Phase.SCALED_IN, f"spec.replicas={snapshot.wanted_replicas}; "
                                                      f"deleted {len(result.deleted)} objects")
            self._look_again()  # wanted again: look once more
            return None
        snapshot = await self._materialise(snapshot)
        topology = self.state.topology
        if topology is None:  # never had a valid spec: nothing exists, nothing to drive
            self._snapshot = snapshot
            self._set_phase(Phase.INVALID)
            return None
        await self._release_gates(topology, snapshot)
        await self._start_in_order(topology, snapshot)
        updating = await self._roll(topology, snapshot)
        observation = presentation.observation(snapshot, updating)
        if self._reached:
            self.state.memory, self._reached = remember_reached(self.state.memory, observation, self._reached)
        evaluation = evaluate_replica(topology, observation, self.state.memory,
                                      self._now(), self._due_by(self.state.deadline_fired))
        self.state.memory = evaluation.memory
        await self._mirror(topology, snapshot, evaluation)
        await self._announce_breaches(evaluation)
        # The status query shows a round as a whole, once its status is mirrored: snapshot, evaluation and phase
        # together (never a new deadline under the previous round's phase).
        self._snapshot, self._evaluation = snapshot, evaluation
        termination = None
        if self._decide_fresh(snapshot, evaluation):
            # Something destructive may be due, but this round read the cache: decide on a fresh read from the
            # apiserver, made at once (a cache that lags would otherwise delete on what it has not heard yet).
            self._fresh_next = True
        else:
            termination = self._next_termination(topology, evaluation)
        self._set_phase(Phase.TERMINATING if termination is not None else self._phase_of(snapshot, evaluation))
        if termination is not None:
            carried_out = await self._terminate(topology, snapshot, termination, updating)
            self._look_again()  # look again at once: recreate, and see what is left
            self._set_phase(Phase.CREATING if carried_out else self._phase_of(snapshot, evaluation))
        return None

    async def _observe(self) -> ReplicaSnapshot:
        """The round's read: from the watch cache when nothing in it may be destructive and every pending nudge
        can be judged by resourceVersion; from the apiserver otherwise (DESIGN §4, issue 17)."""
        scheduled_at, reading = workflow.now(), self._nudges.reading()
        if self._cached_reads and self._may_read_cache():
            request = CachedObserveRequest(ref=self.ref, at_least=self._nudges.cache_at_least(),
                                           mirror=self._mirror_with_read())
            snapshot = await self._activity(OBSERVE_REPLICA_CACHED, request, ReplicaSnapshot,
                                            f"observe {self.ref} (watch cache)")
        else:
            snapshot = await self._activity(OBSERVE_REPLICA, self.ref, ReplicaSnapshot, f"observe {self.ref}")
        self._took_read(snapshot, scheduled_at, reading)
        return snapshot

    def _took_read(self, snapshot: ReplicaSnapshot, scheduled_at: datetime, reading: int) -> None:
        """What a round's read answers: the nudges it has reached, and a fresh read asked for, where it is one."""
        if not snapshot.from_cache:
            self._fresh_next = False
        self._nudges.observed(snapshot, None if snapshot.from_cache else scheduled_at, reading)
        if self._round_start is not None:
            self._round_start.nudges.observed(snapshot, None if snapshot.from_cache else scheduled_at, reading)
        self._not_before(snapshot)

    def _materialises_on_read(self) -> bool:
        """A new replica's first read materialises it (FIRST_READ_MATERIALISES_RULE): the run's first read, nothing
        materialised before (no run before it did: a continued run carries the topology), on the watch cache, where
        this run materialises in a local activity that releases the base gang and writes the round's status."""
        return (not self._read_once and self.state.topology is None
                and self._patched.covers(FIRST_READ_MATERIALISES_RULE)
                and self._cached_reads and self._ensure_mirrors and self._may_read_cache()
                and self._patched(ENSURE_RELEASES_BASE_PATCH))

    async def _read_materialising(self) -> ReplicaSnapshot:
        """The round's read and its materialising in one local activity (FIRST_READ_MATERIALISES_RULE). Its result
        is taken as both: the nudges it answers, as a read's; what it made and released, as materialising's."""
        scheduled_at, reading = workflow.now(), self._nudges.reading()
        request = EnsureRequest(ref=self.ref, cached=True, at_least=self._nudges.cache_at_least(),
                                release_base=not self.state.paused, mirror=self._mirror_with_read(), first_read=True)
        result = await self._activity(ENSURE_REPLICA_RELEASING, request, EnsureResult,
                                      f"read and materialise new replica {self.ref} (watch cache)")
        snapshot: ReplicaSnapshot = result.snapshot
        self._took_read(snapshot, scheduled_at, reading)
        self._took_materialised(result)
        return snapshot

    def _mirror_with_read(self) -> MirrorWithRead | None:
        """What the read needs to write the status this round will mirror (MIRROR_WITH_READ_PATCH): the memory and
        digests as they stand now, and the decision time the round's evaluation will floor at the read's time."""
        if not self._read_mirrors or self._decision_time is None:
            return None
        return MirrorWithRead(memory=self.state.memory, mirrored=dict(self.state.mirrored),
                              replica_available=self.state.replica_available, decided_at=self._decision_time,
                              due_by=self._due_by(self.state.deadline_fired) or EPOCH)

    def _not_before(self, snapshot: ReplicaSnapshot) -> None:
        """Under READ_TIME_FLOOR_PATCH, decide no earlier than the moment this read was taken."""
        if self._read_time_floor and self._decision_time is not None and snapshot.read_at > self._decision_time:
            self._decision_time = snapshot.read_at

    def _may_read_cache(self) -> bool:
        """Not when this round may delete or recreate (a fresh read was asked for, a rolling update turn or an
        operator's request is in hand), nor for a nudge without versions (judged by the clock, or untimed: a cache
        read can answer neither). A run's first round may: where the cache lacks the PodCliqueSet, the activity
        reads the apiserver."""
        return not (self._fresh_next or self._rollout.active or self._controls.queued()
                    or self._nudges.fresh_needed())

    def _decide_fresh(self, snapshot: ReplicaSnapshot, evaluation: ReplicaEvaluation) -> bool:
        """A cached read, and a termination may be due (a breach past its deadline, or an operator's request)."""
        if not snapshot.from_cache:
            return False
        return self._controls.queued() or bool(
            evaluation.terminations and not self.state.paused and not self._held)

    async def _roll(self, topology: ReplicaTopology, snapshot: ReplicaSnapshot) -> frozenset[str]:
        """The rolling update step of this round, while the rollout workflow has granted this replica a turn."""
        if not self._rollout.active:
            return frozenset()
        if snapshot.from_cache:  # a turn granted during this round: act on it after a fresh read, at once
            self._fresh_next = True
        hold = self.state.paused or self._held or snapshot.from_cache
        updating = await self._rollout.round(topology, snapshot, hold=hold, run_activity=self._activity, now=self._now(),
                                             due_by=self._due_by(self.state.progress_fired))
        if self._rollout.step is not None and self._rollout.step.acts and not hold:
            self._look_again()  # recreate what was deleted at once
        return updating

    def _now(self) -> datetime:
        """Workflow time for decisions that compare it with a deadline (DECISION_TIME_PATCH)."""
        if self._stable_time and self._decision_time is not None:
            return self._decision_time
        return workflow.now()

    def _due_by(self, fired: datetime | None) -> datetime | None:
        """Under TIMER_JUDGED_PATCH, what is due: up to the latest deadline a timer fired for (else `_now()`)."""
        if not self._timer_judged:
            return None
        return fired or EPOCH

    def _until(self, due: datetime) -> timedelta:
        """How long a wait for `due` lasts: under DECISION_TIME_PATCH never zero, so the wait is a timer whether or
        not workflow time (which a local activity may have moved) is already past it."""
        return max(due - workflow.now(), MIN_TIMER if self._stable_time else timedelta(0))

    def _outcome(self, phase: Phase, message: str) -> ReplicaOutcome:
        workflow.logger.info("replica workflow completes: %s: %s", phase.value, message)
        return ReplicaOutcome(phase=phase, message=message, terminations_total=self.state.terminations_total)

    async def _wait(self) -> None:
        timeout: timedelta | None = self.input.safety_resync
        summary = "safety resync"
        fires_for: tuple[str, datetime] | None = None  # the deadline this wait's timer is for (TIMER_JUDGED_PATCH)
        deadlines = presentation.deadline_statuses(self._evaluation) if self._evaluation else ()
        if self._retry_after is not None:
            timeout, summary = self._retry_after, "retry after a failed activity"
        elif deadlines and not self.state.paused and not self._held:
            timeout = self._until(deadlines[0].due_at)
            summary, fires_for = presentation.timer_summary(deadlines), ("deadline", deadlines[0].due_at)
        elif deadlines and self._patched(HELD_DEADLINES_PATCH):
            # Paused or invalid: nothing is acted on, but a round when the deadline passes moves it from pending
            # to due-and-held, so status never shows an expired deadline as pending.
            timeout = self._until(deadlines[0].due_at)
            summary = "held, look again when due: " + presentation.timer_summary(deadlines)
            fires_for = ("deadline", deadlines[0].due_at)
        if self._retry_after is None and self._rollout.due is not None:
            until = self._until(self._rollout.due)
            if timeout is None or until < timeout:
                timeout, summary = until + timedelta(seconds=1), "rolling update progressDeadline"
                fires_for = ("progress", self._rollout.due)
        # No retry and no deadline: only the safety resync bounds this wait.
        if self._retry_after is None and fires_for is None and self._one_safety_timer:
            self._arm_safety_timer()
            timeout = None  # the running safety timer ends this wait (woken), no timer of its own
        # After a failed round only a new control request cuts the back-off short (a request still queued from
        # before would otherwise spin the loop against the failing activity).
        tickets = self._controls.tickets if self._retry_after is not None else None

        def woken() -> bool:
            if self._safety_fired:
                return True
            if tickets is not None:
                return self._nudges.due() or self._controls.tickets != tickets
            return self._nudges.due() or self._controls.queued()

        blocked = not woken()
        if blocked and timeout is not None:
            self._tally.add(EVENTS_PER_TIMER_STARTED)
        try:
            await workflow.wait_condition(woken, timeout=timeout, timeout_summary=summary)
            if blocked and timeout is not None:
                self._tally.add(EVENTS_PER_TIMER_CANCELED)
        except TimeoutError:
            self._tally.add(EVENTS_PER_TIMER_FIRED)
            if fires_for is not None and self._timer_judged:  # the timer fired: an event, the same in every replay
                self._fired(*fires_for)
        if blocked:  # woken by a new workflow task (a timer, a signal, an update): its time is in the history
            self._decision_time = workflow.now()
        if self._safety_fired:  # this round is the resync; the next wait starts the next timer
            self._safety_fired, self._safety_timer = False, None

    def _fired(self, kind: str, due: datetime) -> None:
        if kind == "deadline":
            self.state.deadline_fired = max(due, self.state.deadline_fired or due)
        else:
            self.state.progress_fired = max(due, self.state.progress_fired or due)

    def _arm_safety_timer(self) -> None:
        """Start the safety-resync timer unless one is running (ONE_SAFETY_TIMER_PATCH)."""
        if self._safety_timer is not None:
            return

        async def resync() -> None:
            self._tally.add(EVENTS_PER_TIMER_STARTED)
            await workflow.sleep(self.input.safety_resync, summary="safety resync")
            self._tally.add(EVENTS_PER_TIMER_FIRED)
            self._safety_fired = True

        self._safety_timer = asyncio.create_task(resync())

    # --- steps -----------------------------------------------------------------------------------------------------
    async def _materialise(self, snapshot: ReplicaSnapshot) -> ReplicaSnapshot:
        if not snapshot.valid:
            if snapshot.problems != self._problems:
                workflow.logger.warning("spec invalid, holding replica as it is: %s", "; ".join(snapshot.problems))
            self._problems, self._held = snapshot.problems, True
            return snapshot
        self._problems, self._held = (), False
        self.state.topology, self.state.release_after = snapshot.topology, snapshot.release_after
        if not snapshot.drift:
            return snapshot
        # After a read from the cache, on the cache too (once it has seen as much; deletions go to a fresh read).
        # After a fresh read, on a fresh read: a LIST's version is the store's, past what a watch of one kind may
        # ever deliver, so a cache could not be waited on to reach it.
        arg: ReplicaRef | CachedObserveRequest | EnsureRequest
        name, arg = ((ENSURE_REPLICA_CACHED, CachedObserveRequest(ref=self.ref, at_least=snapshot.read_versions))
                     if snapshot.from_cache else (ENSURE_REPLICA, self.ref))
        if self._patched(ENSURE_RELEASES_BASE_PATCH):
            name, arg = ENSURE_REPLICA_RELEASING, EnsureRequest(
                ref=self.ref, cached=snapshot.from_cache,
                at_least=snapshot.read_versions if snapshot.from_cache else {},
                release_base=not self.state.paused, release_after=self.state.release_after,
                mirror=self._mirror_with_read() if self._ensure_mirrors else None)
        reading = self._nudges.reading()
        try:
            result = await self._activity(
                name, arg, EnsureResult, "materialise: " + "; ".join(snapshot.drift)[:200],
                raise_on=("InvalidPodCliqueSet",),
            )
        except ApplicationError as err:  # became invalid between observe and ensure
            self._problems, self._held = (str(err.message),), True
            return snapshot
        self._nudges.observed(result.snapshot, None, reading)
        self._not_before(result.snapshot)
        after = result.snapshot.topology
        if after is not None and after != self.state.topology and self._patched(ENSURE_TOPOLOGY_PATCH):
            self.state.topology, self.state.release_after = after, result.snapshot.release_after
        self._took_materialised(result)
        return result.snapshot

    def _took_materialised(self, result: EnsureResult) -> None:
        """When the base gang was first released, where materialising released it; what it changed, in the log."""
        if result.released_base:
            self.state.base_released_at = self.state.base_released_at or workflow.now()
        if result.created or result.deleted or result.updated:
            workflow.logger.info("materialised: created=%d updated=%d deleted=%d %s", len(result.created),
                                 len(result.updated), len(result.deleted), list(result.deleted))

    async def _release_gates(self, topology: ReplicaTopology, snapshot: ReplicaSnapshot) -> None:
        decision = decide_releases(topology, presentation.gate_states(snapshot), self.state.release_after)
        self._gates = decision
        if self.state.paused or self._held or not decision.pods:  # held (invalid spec): change nothing, gates included
            return
        uids = {name: uid for state in snapshot.cliques.values() for name, uid in state.releasable.items()}
        if decision.base and decision.scaled and self._patched(ONE_RELEASE_PATCH):
            await self._release(self._scaled_pods(decision), uids, "scaled", tuple(sorted(decision.scaled)),
                                self._scaled_requires(topology), base=(decision.base, decision.base_gang))
            self.state.base_released_at = self.state.base_released_at or workflow.now()
            self.state.scaled_released_at = self.state.scaled_released_at or workflow.now()
            return
        if decision.base:
            await self._release(decision.base, uids, "base", (decision.base_gang,))
            self.state.base_released_at = self.state.base_released_at or workflow.now()
        if decision.scaled:
            await self._release(self._scaled_pods(decision), uids, "scaled", tuple(sorted(decision.scaled)),
                                self._scaled_requires(topology))
            self.state.scaled_released_at = self.state.scaled_released_at or workflow.now()

    @staticmethod
    def _scaled_pods(decision: GateDecision) -> tuple[str, ...]:
        return tuple(pod for gang_pods in decision.scaled.values() for pod in gang_pods)

    def _scaled_requires(self, topology: ReplicaTopology) -> dict[str, int]:
        """The snapshot can be seconds old (a lost node's base pods are force-deleted by the pod GC meanwhile): the
        activity checks the base gang again on a read of its own before it removes a scaled gate."""
        return ({unit.name: unit.min_available for unit in base_members(topology)}
                if self._patched(SCALED_RELEASE_RECHECK_PATCH) else {})

    async def _start_in_order(self, topology: ReplicaTopology, snapshot: ReplicaSnapshot) -> None:
        """Startup order: pods whose parent cliques have every pod Ready are marked started. Added after v0.1.0 and
        only ever needed by PodCliqueSets with a startup order: patch-guarded where it first issues a command."""
        decision = decide_starts(topology, presentation.startup_states(snapshot))
        self._startup = decision
        if self.state.paused or self._held or not decision.pods:
            return
        if not self._patched(STARTUP_ORDER_PATCH):
            return
        uids = {pod: uid for state in snapshot.cliques.values() for pod, uid in state.startup_waiting.items()}
        cliques = {pclq: unit.starts_after for unit in topology.cliques
                   if (pclq := unit.name) in decision.release}
        request = StartupRequest(ref=self.ref, pods={p: uids[p] for p in decision.pods}, cliques=cliques)
        await self._activity(RELEASE_STARTUP, request, StartupResult,
                             f"start {len(request.pods)} pods in order: {', '.join(sorted(decision.release))}")

    async def _release(self, pods: tuple[str, ...], uids: dict[str, str], kind: str, gangs: tuple[str, ...],
                       base_requires: dict[str, int] | None = None,
                       base: tuple[tuple[str, ...], str] = ((), "")) -> None:
        """One release_gates activity; `base`: the base gang's pods and name, released by it after `pods`."""
        base_pods, base_gang = base
        request = ReleaseRequest(ref=self.ref, pods={p: uids[p] for p in pods}, gang_kind=kind, gangs=gangs,
                                 base_requires=base_requires or {}, release_after=self.state.release_after,
                                 base={p: uids[p] for p in base_pods}, base_gang=base_gang)
        summary = f"release {len(pods)} {kind} pods of {', '.join(gangs)}"
        if base_pods:
            summary += f", then {len(base_pods)} base pods of {base_gang}"
        await self._activity(RELEASE_GATES, request, ReleaseResult, summary)

    async def _mirror(self, topology: ReplicaTopology, snapshot: ReplicaSnapshot,
                      evaluation: ReplicaEvaluation) -> None:
        changed = presentation.changed_mirrors(topology, snapshot, evaluation, self.state.mirrored)
        availability_changed = evaluation.replica_available != self.state.replica_available
        if snapshot.mirrored is not None and self._read_mirrors:  # what the round's read already wrote
            written = {m.name: presentation.digest(m) for m in changed
                       if snapshot.mirrored.digests.get(m.name) == presentation.digest(m)}
            self.state.mirrored.update(written)
            changed = tuple(m for m in changed if m.name not in written)
            if availability_changed and snapshot.mirrored.replica_available == evaluation.replica_available:
                self.state.replica_available, availability_changed = evaluation.replica_available, False
        if not changed and not availability_changed:
            return
        request = MirrorRequest(ref=self.ref, objects=changed, pcs_available_changed=availability_changed)
        await self._activity(MIRROR_STATUS, request, list, f"mirror status of {len(changed)} objects")
        self.state.mirrored.update({m.name: presentation.digest(m) for m in changed})
        self.state.replica_available = evaluation.replica_available

    async def _announce_breaches(self, evaluation: ReplicaEvaluation) -> None:
        """Kubernetes Events when a breach begins (saying when it will be acted on) and when it heals.

        Added after the first release: guarded by a patch so that histories of workflows started before it, which
        have no such activity, still replay (see docs/architecture.md, "Upgrading the workflow safely")."""
        breaches = presentation.current_breaches(evaluation)
        started = {name: text for name, (start, text) in breaches.items()
                   if self.state.announced_breaches.get(name) != start}
        healed = sorted(set(self.state.announced_breaches) - set(breaches))
        if not started and not healed:
            return
        if not self._patched(BREACH_EVENTS_PATCH):
            return
        if started:
            await self._activity(RECORD_EVENT, EventRequest(ref=self.ref, reason="BreachDetected", type="Warning",
                                                              message="; ".join(started.values())),
                                 type(None), f"announce breach: {', '.join(sorted(started))}")
        if healed:
            await self._activity(RECORD_EVENT, EventRequest(ref=self.ref, reason="BreachHealed",
                                                              message="healed: " + ", ".join(healed)),
                                 type(None), f"announce healed: {', '.join(healed)}")
        self.state.announced_breaches = {name: start for name, (start, _) in breaches.items()}

    def _next_termination(self, topology: ReplicaTopology, evaluation: ReplicaEvaluation) -> Termination | None:
        """Forced requests first (they ignore pause and delay); then what is due, unless paused or held."""
        forced = self._controls.next_forced(lambda request: controls.forced_plan(topology, request))
        if forced is not None:
            return forced
        if self.state.paused or self._held or not evaluation.terminations:
            return None
        return evaluation.terminations[0]

    async def _terminate(self, topology: ReplicaTopology, snapshot: ReplicaSnapshot, termination: Termination,
                         updating: frozenset[str]) -> bool:
        """Carry out one termination; False when the activity found the breach healed and deleted nothing."""
        self._set_phase(Phase.TERMINATING)
        uids = {
            name: state.uid
            for name in termination.cliques
            if (state := snapshot.cliques.get(name)) is not None and not state.terminating
        }
        gangs = gangs_of_termination(topology, termination.cliques, termination.scope is Scope.PCS_REPLICA)
        request = TerminateRequest(
            ref=self.ref, scope=termination.scope, scaling_group=termination.scaling_group,
            scaling_group_replica=termination.scaling_group_replica, cliques=uids, pod_gangs=gangs,
            reason=termination.reason, forced=termination.forced, breach_start=termination.breach_start,
            delay=termination.delay, deadline=termination.deadline,
            # What a breach's termination was decided on, for terminate_gang to decide it again on a read of its
            # own when this read is old (an attempt retried after a kube-apiserver outage). No patch: the commands
            # differ only after a result that says it found the breach healed, which no older history holds, and a
            # replay does not compare an activity's input (tests/workflows/test_upgrade_compat.py).
            recheck=None if termination.forced else BreachRecheck(
                topology=topology, memory=self.state.memory, updating=tuple(sorted(updating)),
                read_at=snapshot.read_at),
        )
        what = termination.scope.value + (
            f" {termination.scaling_group}[{termination.scaling_group_replica}]" if termination.scaling_group else ""
        )
        result = await self._activity(TERMINATE_GANG, request, TerminateResult, f"gang-terminate {what}")
        if result.healed:
            # Nothing was deleted: the next round, at once, sees the breach healed (or breached anew) for itself.
            workflow.logger.warning("gang termination of %s not carried out: %s", what, result.healed)
            self.state.memory = forget_healed(self.state.memory, termination)
            return False
        record = TerminationRecord(
            incarnation=self.state.incarnation, at=workflow.now(), scope=termination.scope,
            scaling_group=termination.scaling_group, scaling_group_replica=termination.scaling_group_replica,
            cliques=termination.cliques, reason=termination.reason, forced=termination.forced,
            breach_start=termination.breach_start, delay=termination.delay, deadline=termination.deadline,
        )
        self.state.memory = forget_terminated(self.state.memory, termination)
        for name in termination.cliques:
            self.state.mirrored.pop(name, None)
        self.state.terminations = (*self.state.terminations, record)[-TERMINATION_LOG_KEPT:]
        self.state.terminations_total += 1
        if termination.scope is Scope.PCS_REPLICA:
            self.state.incarnation += 1
            self.state.base_released_at = self.state.scaled_released_at = None
        if termination.forced and self._controls.queued():
            self._controls.carried_out(what, record)
        workflow.logger.warning("gang-terminated %s: %s", what, termination.reason)
        return True

    # --- phase, search attributes, UI --------------------------------------------------------------------------------
    def _phase_of(self, snapshot: ReplicaSnapshot, evaluation: ReplicaEvaluation) -> Phase:
        return presentation.phase_of(snapshot, evaluation, self._gates, self._held)

    def _set_phase(self, phase: Phase) -> None:
        self.state.phase = phase
        updates = self._search.updates(phase, self.state.paused)
        if updates:
            workflow.upsert_search_attributes(updates)
            self._tally.add(EVENTS_PER_UPSERT)
        self._mirror_deadlines(phase)

    def _mirror_deadlines(self, phase: Phase) -> None:
        """The deadlines the status query shows, in the memo (DEADLINE_MEMO_PATCH); written only when they change."""
        deadlines = presentation.pending_deadlines(self.state, self._snapshot, self._evaluation)
        current = workflow.memo_value(DEADLINE_MEMO, None, type_hint=DeadlineMemo)
        memo = presentation.deadline_memo_update(current, deadlines, phase)
        if memo is not None and self._patched(DEADLINE_MEMO_PATCH):
            workflow.upsert_memo({DEADLINE_MEMO: memo})
            self._tally.add(EVENTS_PER_UPSERT)

    def _render(self) -> None:
        status = self.status()
        workflow.set_current_details(
            presentation.details_markdown(
                phase=self.state.phase.value, paused=self.state.paused, pause_reason=self.state.pause_reason,
                incarnation=self.state.incarnation, problems=self._problems, cliques=status.cliques,
                deadlines=status.deadlines, gates=self._gates, startup=status.startup,
                last_termination=self.state.terminations[-1] if self.state.terminations else None,
                terminations_total=self.state.terminations_total, held=status.held,
                rollout=self._rollout.markdown(),
            )
        )

    # --- activities ----------------------------------------------------------------------------------------------
    async def _activity(self, name: str, arg: Any, result_type: type, summary: str,
                        raise_on: tuple[str, ...] = ()) -> Any:
        try:
            if ((self._local_activities and name in LOCAL_ACTIVITIES)
                    or (self._local_releases and name in LOCAL_RELEASES)
                    or (self._local_ensure and name in LOCAL_ENSURES)):
                self._tally.add(EVENTS_PER_LOCAL_ACTIVITY)
                return await workflow.execute_local_activity(
                    name, arg, result_type=result_type, start_to_close_timeout=LOCAL_ACTIVITY_TIMEOUT,
                    retry_policy=ACTIVITY_RETRY, local_retry_threshold=LOCAL_RETRY_THRESHOLD, summary=summary[:200],
                )
            self._tally.add(EVENTS_PER_ACTIVITY)
            result = await workflow.execute_activity(
                name, arg, result_type=result_type, start_to_close_timeout=ACTIVITY_TIMEOUT,
                heartbeat_timeout=self._heartbeat_timeout, retry_policy=ACTIVITY_RETRY, summary=summary[:200],
            )
            self._decision_time = workflow.now()  # a new workflow task delivered the result: replay-safe
            return result
        except ActivityError as err:
            cause = err.cause
            if isinstance(cause, ApplicationError) and cause.type in raise_on:
                raise cause from err
            message = str(cause.message if isinstance(cause, ApplicationError) else cause or err)
            workflow.logger.error("activity %s failed: %s", name, message)
            self._problems = (f"{name}: {message}",)
            raise _Failed(message) from err

    # --- continue-as-new -------------------------------------------------------------------------------------------
    def _handover_reason(self, *, at_round_end: bool = False) -> str | None:
        """Why this run should continue-as-new now, or None. `at_round_end`: judged where a round ended, as of the
        round's start under ROUND_START_RULE."""
        start = self._round_start if at_round_end else None
        # Runs of baseline 14 on judge by the length they count (COUNTED_EVENTS_RULE).
        length = self._tally.events if self._patched.covers(COUNTED_EVENTS_RULE) else None
        if start is not None and length is not None:
            length -= self._tally.messages - start.messages
        reason = history_calls_for_handover(self.input.history_event_limit, self._patched, length)
        if reason is not None:
            return reason
        received = start.received if start is not None else self._received
        spent = received.spent(self.input.signal_limit, self.input.update_limit)
        if spent is not None and self._patched(SIGNAL_BUDGET_PATCH):
            return spent
        return quiet_calls_for_handover(lambda: self._quiet(start), self._patched, length)

    def _took_update_this_task(self) -> bool:
        """Whether an update was accepted in the task that would hand over. Runs of baseline 14 on count the updates
        taken since the last round began or the last wait for a hand-over (COUNTED_EVENTS_RULE): which task took one
        is not the same in every replay, so at worst they wait one short timer more than they need."""
        if self._patched.covers(COUNTED_EVENTS_RULE):
            return self._received.updates > self._updates_judged
        return self._update_task == workflow.info().get_current_history_length()

    def _quiet(self, start: _RoundStart | None = None) -> bool:
        """Nothing in flight: the last round found the replica Available with no deadline pending, no rolling-update
        turn, no fresh read owed, nothing paused, held, queued or failed, and no nudge waiting for a round. A hand-over
        then splits no episode (a breach and its termination, a replica's update) across runs. `start`: what messages
        had set when the round began (ROUND_START_RULE), in place of what they have set since."""
        evaluation = self._evaluation
        if start is not None:
            paused, queued = start.paused, start.queued
            active = start.rollout_active and self._rollout.turns_ended == start.turns_ended
            nudged = start.nudges.due()
        else:
            paused, active, queued = self.state.paused, self._rollout.active, bool(self._controls.queued())
            nudged = self._nudges.due()
        return (self._rounds_begun > 0 and self.state.phase is Phase.AVAILABLE and evaluation is not None
                and not evaluation.deadlines and not evaluation.terminations and not active
                and self._rollout.due is None and not paused and not self._held and not self._fresh_next
                and self._retry_after is None and not queued and not nudged)

    def _look_again(self) -> None:
        """The round asks for another at once: a decision of the round itself, the same in every replay, so the
        round-start copy of the nudges (ROUND_START_RULE) takes it too."""
        self._nudges.look_again = True
        if self._round_start is not None:
            self._round_start.nudges.look_again = True

    def _next_input(self) -> ReplicaInput:
        nudges = self._nudges.carry()
        if self._snapshot is not None and not self._snapshot.from_cache and not nudges.fresh:
            # This run last read the apiserver (a rolling update turn, a deadline, a nudge without versions): the next
            # run's first read is from the apiserver too. A watch cache lagging behind that read could show what it
            # had already seen change (a breach just healed: a new breach clock and Event for nothing).
            nudges = nudges.model_copy(update={"fresh": True})
        carry = self.state.model_copy(deep=True, update={"runs": self.state.runs + 1, "nudges": nudges})
        # The next run is begun by this release: under its newest baseline, whatever this run was begun under. (A
        # replay does not compare the input of a recorded continue-as-new, so a run begun earlier replays unchanged.)
        return self.input.model_copy(update={"carry": carry, "baseline": NEWEST_INPUT_BASELINE})

    # --- messages ----------------------------------------------------------------------------------------------------
    @workflow.signal(name=NUDGE_SIGNAL)
    def nudge(self, nudge: Nudge | None = None) -> None:
        """Something this replica cares about changed in Kubernetes: look again, unless an observation that began
        after the nudge was sent has already looked (then it saw the change)."""
        self._took_signal(nudge=True)
        self.state.nudges_total += 1
        self._nudges.received(nudge)
        if nudge is not None and nudge.reached:
            self._reached.update(nudge.reached)

    @workflow.signal(name=ROLLOUT_TURN_SIGNAL)
    def rollout_turn(self, turn: RolloutTurn) -> None:
        """The rollout workflow grants (or changes, or revokes) this replica's turn of a rolling update."""
        self._tally.add_message(EVENTS_PER_SIGNAL)
        if self._rollout.grant(turn):
            self._nudges.look_again = True

    @workflow.signal(name=PAUSE)
    def pause(self, request: PauseRequest | None = None) -> None:
        self._took_signal()
        self._pause(request or PauseRequest())

    @workflow.signal(name=RESUME)
    def resume(self) -> None:
        self._took_signal()
        self._resume()

    @workflow.signal(name=FORCE_TERMINATE)
    def force_terminate(self, request: ForceTerminateRequest) -> None:
        self._took_signal()
        try:
            controls.validate_force(self.ref, self.state.topology, request)
        except ValueError as err:
            self._controls.reject_signal(err)
            return
        self._controls.enqueue(request)

    def _took_signal(self, *, nudge: bool = False) -> None:
        self._received.signal(nudge=nudge)
        self._tally.add_message(EVENTS_PER_SIGNAL)

    def _took_update(self) -> None:
        self._received.update()
        self._tally.add_message(EVENTS_PER_UPDATE)
        self._update_task = workflow.info().get_current_history_length()  # the same in every replay (UPDATE_HANDOVER_PATCH)

    @workflow.update(name=PAUSE)
    def pause_update(self, request: PauseRequest) -> ControlResult:
        self._took_update()
        was = self._pause(request)
        return ControlResult(accepted=True, message="already paused" if was else "paused")

    @workflow.update(name=RESUME)
    def resume_update(self) -> ControlResult:
        self._took_update()
        was = self._resume()
        return ControlResult(accepted=True, message="resumed" if was else "was not paused")

    @workflow.update(name=FORCE_TERMINATE)
    async def force_terminate_update(self, request: ForceTerminateRequest) -> ControlResult:
        self._took_update()
        return await self._controls.result(self._controls.enqueue(request))

    @force_terminate_update.validator
    def _validate_force_update(self, request: ForceTerminateRequest) -> None:
        controls.validate_force(self.ref, self.state.topology, request)

    @workflow.query(name=STATUS_QUERY)
    def status(self) -> ReplicaStatus:
        return presentation.replica_status(
            self.ref, self.state, snapshot=self._snapshot, evaluation=self._evaluation, gates=self._gates,
            startup=self._startup, problems=self._problems, held=self._held, rejected=tuple(self._controls.rejected),
            rollout=self._rollout.view(), received=self._received, counted=self._tally.events,
        )

    # --- pause and resume: the durable part is in workflows/controls.py; here the phase and UI follow ----------------
    def _pause(self, request: PauseRequest) -> bool:
        was = controls.pause(self.state, request)
        self._set_phase(self.state.phase)
        self._render()
        return was

    def _resume(self) -> bool:
        was = controls.resume(self.state)
        self._nudges.look_again = True  # act at once on anything that expired while paused
        self._set_phase(self.state.phase)
        return was
