"""Every value that crosses the workflow boundary: workflow inputs, activity inputs and results, signals, updates
and queries. Small pydantic models (they travel through temporalio.contrib.pydantic's converter and are stored in
history), no Kubernetes types: activities translate Kubernetes objects into these compact shapes.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from grove.evaluate import ReplicaMemory
from grove.release import ReleaseAfter
from grove.rollout import RolloutSpec
from grove.termination import Scope
from grove.topology import ReplicaTopology
from workflows.contract import replica_workflow_id
from workflows.rollout_messages import ReplicaRolloutCarry, RolloutView, carried
from workflows.signals import SIGNALS_PER_RUN, UPDATES_PER_RUN


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- identity --------------------------------------------------------------------------------------------------
class ReplicaRef(Message):
    namespace: str
    pcs: str
    pcs_uid: str
    replica: int = Field(ge=0)

    @property
    def workflow_id(self) -> str:
        return replica_workflow_id(self.namespace, self.pcs, self.pcs_uid, self.replica)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pcs}[{self.replica}]"


# --- observation -----------------------------------------------------------------------------------------------
class PcsState(StrEnum):
    PRESENT = "Present"
    ABSENT = "Absent"  # gone: deleted, objects follow through owner references
    REPLACED = "Replaced"  # same name, different UID: a new PCS that is not ours to drive
    DELETING = "Deleting"  # deletionTimestamp set


class CliqueState(Message):
    """One existing PodClique as read from the cluster (pods that are terminating are not counted)."""

    uid: str
    terminating: bool = False
    pods: int = 0
    ready: int = 0
    scheduled: int = 0
    gated: int = Field(default=0, description="pods carrying grove.io/podgang-pending-creation")
    releasable: dict[str, str] = Field(
        default_factory=dict, description="gated pods already referenced by their PodGang: name -> UID"
    )
    startup_waiting: dict[str, str] = Field(
        default_factory=dict, description="pods still waiting for their startup order (grove.startup): name -> UID"
    )
    # Rolling updates (grove.rollout); empty when the spec could not be planned.
    target_hash: str = Field(default="", description="pod template hash the current spec gives this PodClique")
    outdated: dict[str, str] = Field(
        default_factory=dict, description="live pods labelled with another pod template hash: name -> UID")
    outdated_ready: tuple[str, ...] = Field(default=(), description="the outdated pods that are Ready")
    updated_ready: int = Field(default=0, description="Ready pods at the target template")


class Nudge(Message):
    """The nudge signal's payload: when its sender asked (its clock). A replica's last observation started after
    that covers it, so whether a nudge calls for another round depends only on what the history records, never on
    where in a workflow task the signal was applied.

    `versions` never travels in the payload (a worker that predates the field would drop the signal): the watcher
    sends it as the NUDGE_VERSIONS_HEADER header and `workflows/nudge_versions.py` puts it here on arrival. Where it is
    set it decides alone, with no clock in it (workflows/nudges.py)."""

    sent_at: AwareDatetime
    versions: dict[str, int] | None = Field(
        default=None, description="kind -> resourceVersion of the newest watch event this nudge stands for")
    # From NUDGE_REACHED_HEADER, like `versions`; never serialized, so a worker that predates it still decodes the
    # payload of a nudge a newer watcher sent.
    reached: dict[str, str] | None = Field(
        default=None, exclude=True,
        description="PodClique name -> UID of the incarnation the watcher saw reach its minAvailable")


class MirrorWithRead(Message):
    """What a round's read needs to write the status the round will mirror (MIRROR_WITH_READ_PATCH): the workflow's
    memory and what it last mirrored, as they stand when it schedules the read. The activity evaluates its read with
    the same pure functions the workflow then runs on the recorded result, so the round's own mirror is left with
    nothing to write, unless something between the read and the evaluation changed what it computes."""

    memory: ReplicaMemory
    mirrored: dict[str, str] = Field(default_factory=dict, description="object name -> digest last mirrored")
    replica_available: bool | None = None
    decided_at: AwareDatetime = Field(
        description="the round's decision time before the read; the evaluation's is the later of it and read_at")
    due_by: AwareDatetime = Field(description="deadlines at or before this are due (the latest timer fired)")


class MirroredWithRead(Message):
    """What the read wrote (MIRROR_WITH_READ_PATCH): recorded with its result, so every replay skips the same writes."""

    digests: dict[str, str] = Field(default_factory=dict, description="object name -> digest of the status written")
    replica_available: bool | None = Field(default=None, description="the availability the PCS was counted with")


class CachedObserveRequest(Message):
    """Observe a replica from the worker's watch cache, once that has seen the watch events of these versions."""

    ref: ReplicaRef
    at_least: dict[str, int] = Field(
        default_factory=dict, description="kind -> resourceVersion of the newest nudge not yet read: the cache must "
                                          "have reached it, else the activity reads the apiserver")
    mirror: MirrorWithRead | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="also write the status the round will mirror, where the read allows it")


class ReplicaSnapshot(Message):
    """One replica as an activity read it, in one call."""

    read_at: AwareDatetime = Field(description="activity clock: for humans, and the earliest a round deciding on this read may decide at (READ_TIME_FLOOR_PATCH); decisions otherwise use workflow time")
    read_from: AwareDatetime | None = Field(
        default=None, description="activity clock just before the first read: nudges sent before it are covered")
    read_versions: dict[str, int] = Field(
        default_factory=dict, description="kind -> resourceVersion the read saw up to (a LIST's own version, the "
                                          "PodCliqueSet's): a nudge for a watch event at or below it is covered")
    pcs_state: PcsState
    pcs_generation: int = 0
    wanted_replicas: int = 0
    problems: tuple[str, ...] = Field(default=(), description="validation problems; empty when the spec is valid")
    topology: ReplicaTopology | None = Field(default=None, description="from the current spec when valid")
    release_after: ReleaseAfter = "Scheduled"
    cliques: dict[str, CliqueState] = Field(default_factory=dict, description="existing PodCliques by name")
    drift: tuple[str, ...] = Field(
        default=(), description="what materialising would change: missing or surplus objects, stale references"
    )
    rollout: RolloutSpec | None = Field(default=None, description="update strategy and budgets of the current spec")
    scheduler_backend: str | None = Field(
        default=None, description="the gang scheduler placing this replica's pods: kube, kai or none (DESIGN §4b)")
    from_cache: bool = Field(
        default=False, description="read from the worker's watch cache: never decided on destructively")
    # Left out of the payload while unset, so the previous release's workers, whose model forbids unknown fields, still
    # decode the snapshots of reads that wrote nothing (every EnsureResult, every run begun before the patch) during a
    # rolling update of the workers.
    mirrored: MirroredWithRead | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="the status this read's activity wrote with it (MIRROR_WITH_READ_PATCH)")

    @property
    def valid(self) -> bool:
        return self.pcs_state is PcsState.PRESENT and not self.problems and self.topology is not None


class EnsureRequest(Message):
    """Materialise a replica (on the watch cache's view, or a fresh read), then release the base gang's gates where
    the workflow asks for that: the pods its decision (grove.release) would release on the snapshot that results."""

    ref: ReplicaRef
    cached: bool = Field(description="on the watch cache's view once it has reached at_least (ensure_replica_cached)")
    at_least: dict[str, int] = Field(default_factory=dict)
    release_base: bool = Field(description="false while the replica is paused: nothing is released")
    release_after: str = "Scheduled"
    mirror: MirrorWithRead | None = Field(
        default=None, exclude_if=lambda value: value is None,
        description="also write the status the round will mirror, on the snapshot materialising leaves")
    first_read: bool = Field(
        default=False, exclude_if=lambda value: not value,
        description="this call is also the round's read (a new replica's first round): where the PodCliqueSet is "
                    "gone, its spec held or invalid, or this replica not wanted, change nothing and return the read "
                    "for the workflow to decide on; base gates are released as the read's own spec says")


class EnsureResult(Message):
    created: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    updated: tuple[str, ...] = ()
    deferred: tuple[str, ...] = Field(
        default=(), description="deletions a cached view called for, taken on a fresh read instead")
    snapshot: ReplicaSnapshot
    released_base: dict[str, str] = Field(
        default_factory=dict, description="base pods whose gate the same activity removed, name -> UID "
                                          "(EnsureRequest.release_base); the snapshot shows them released")


class ReleaseRequest(Message):
    ref: ReplicaRef
    pods: dict[str, str] = Field(description="pod name -> UID; the gate is removed only from that very pod")
    gang_kind: str = Field(description="base | scaled, for the event and metrics")
    gangs: tuple[str, ...] = ()
    base_requires: dict[str, int] = Field(
        default_factory=dict, description="scaled: base PodClique -> pods it must have scheduled (or Ready, per "
        "release_after) on a read made now, or nothing is released (the decision's snapshot may be stale)")
    release_after: str = "Scheduled"
    base: dict[str, str] = Field(
        default_factory=dict, description="base gang pods (name -> UID) released in the same activity after `pods`, "
        "whatever `base_requires` finds: a base pod never waits on its own gang")
    base_gang: str = Field(default="", description="the base PodGang of `base`, for the event")


class StartupRequest(Message):
    """Start pods that waited for their startup order (grove.startup): mark them Released."""

    ref: ReplicaRef
    pods: dict[str, str] = Field(description="pod name -> UID; only that very pod is marked")
    cliques: dict[str, tuple[str, ...]] = Field(
        default_factory=dict, description="PodClique -> the PodCliques whose pods are all Ready now (for the Event)"
    )


class StartupResult(Message):
    started: tuple[str, ...] = ()
    skipped: tuple[str, ...] = Field(default=(), description="gone or replaced since they were read")


class ReleaseResult(Message):
    released: tuple[str, ...] = ()
    released_uids: dict[str, str] = Field(
        default_factory=dict, description="the released pods, name -> UID: a local activity's marker records its "
                                          "result but not its request")
    skipped: tuple[str, ...] = Field(default=(), description="gone, replaced, or no longer gated by us")
    held: str = Field(default="", description="why nothing was released: the base gang is not scheduled now")


class BreachRecheck(Message):
    """What a breach termination was decided on, for grove.evaluate.still_due. An attempt retried after an outage
    (or started late) deletes only if a read of its own still shows the breach: kubelets report Ready again once
    kube-apiserver is back, and a decision read before the outage must not delete what has recovered since."""

    topology: ReplicaTopology
    memory: ReplicaMemory = Field(description="the evaluation's memory: breach starts, available incarnations")
    updating: tuple[str, ...] = Field(default=(), description="PodCliques under a rolling update step then")
    read_at: AwareDatetime = Field(description="activity clock of the read the decision was made on")


class TerminateRequest(Message):
    ref: ReplicaRef
    scope: Scope
    scaling_group: str | None = None
    scaling_group_replica: int | None = None
    cliques: dict[str, str] = Field(description="PCLQ name -> UID of the incarnation to delete")
    pod_gangs: tuple[str, ...] = Field(default=(), description="PodGangs to delete with them")
    reason: str
    forced: bool = False
    breach_start: AwareDatetime | None = None
    delay: timedelta | None = None
    deadline: AwareDatetime
    recheck: BreachRecheck | None = Field(
        default=None, description="a breach's termination: what decided it, to decide it again on a read of the "
                                  "activity's own when the decision's read is old (None: forced, or an older run)")


class TerminateResult(Message):
    deleted: tuple[str, ...] = ()
    already_gone: tuple[str, ...] = ()
    at: AwareDatetime = Field(description="activity clock when the deletes were issued")
    healed: str = Field(default="", description="why nothing was deleted: a read made by the activity no longer "
                                                "shows the breach")


class StepRecheck(Message):
    """What a rolling update step was decided on, for recreate_for_update to decide it again on a read of its own
    when it is a retry or starts late: a Ready outdated pod is deleted only while the PodClique's unavailable pods
    stay within maxUnavailable, and pods may have turned NotReady while kube-apiserver was down."""

    topology: ReplicaTopology
    spec: RolloutSpec
    targets: dict[str, str] = Field(description="PCLQ name -> the pod template hash of the current spec")
    read_at: AwareDatetime = Field(description="activity clock of the read the step was decided on")


class RecreateRequest(Message):
    """Rolling update step: delete these outdated pods and whole PCSG replicas (their PodCliques); materialising
    recreates them from the current template (grove.rollout.replica_step chose them)."""

    ref: ReplicaRef
    pods: dict[str, str] = Field(default_factory=dict, description="pod name -> UID read this round")
    cliques: dict[str, str] = Field(default_factory=dict, description="PCLQ name -> UID read this round")
    generation_hash: str
    units: tuple[str, ...] = ()
    recheck: StepRecheck | None = Field(default=None, description="None: asked by an older run")


class RecreateResult(Message):
    deleted: tuple[str, ...] = ()
    already_gone: tuple[str, ...] = ()
    deferred: tuple[str, ...] = Field(default=(), description="chosen, but a step decided again on a read made by "
                                                             "the activity no longer picks them: left for a later round")


class ConditionMirror(Message):
    type: str
    status: str
    reason: str
    message: str


class ObjectStatusMirror(Message):
    """The status subresource content for one PCLQ or PCSG (DESIGN §4.8)."""

    kind: str  # PodClique | PodCliqueScalingGroup
    name: str
    uid: str | None = None
    fields: dict[str, int] = Field(default_factory=dict)
    conditions: tuple[ConditionMirror, ...] = ()
    texts: dict[str, str] = Field(default_factory=dict, description="string status fields (currentPodTemplateHash)")


class MirrorRequest(Message):
    ref: ReplicaRef
    objects: tuple[ObjectStatusMirror, ...]
    pcs_available_changed: bool = False


class EventRequest(Message):
    ref: ReplicaRef
    reason: str
    message: str
    type: str = "Normal"  # Normal | Warning


class DeleteReplicaResult(Message):
    deleted: tuple[str, ...] = ()
    skipped_reason: str = Field(default="", description="why nothing was deleted, if so")


# --- operator controls -----------------------------------------------------------------------------------------
class PauseRequest(Message):
    reason: str = ""


class ForceTerminateRequest(Message):
    """Terminate now, regardless of delay or pause. No scaling group: the whole PCS replica."""

    reason: str = Field(default="", max_length=1024)
    scaling_group: str | None = Field(default=None, description="PCSG object name ('p-0-sg') or config name ('sg')")
    scaling_group_replica: int | None = None


class ControlResult(Message):
    accepted: bool
    message: str
    termination: TerminationRecord | None = None


# --- memory carried across continue-as-new ---------------------------------------------------------------------
class TerminationRecord(Message):
    incarnation: int = Field(description="replica incarnation that was terminated (1-based)")
    at: AwareDatetime = Field(description="workflow time the deletes were issued")
    scope: Scope
    scaling_group: str | None = None
    scaling_group_replica: int | None = None
    cliques: tuple[str, ...]
    reason: str
    forced: bool = False
    breach_start: AwareDatetime | None = None
    delay: timedelta | None = None
    deadline: AwareDatetime


class Phase(StrEnum):
    PENDING = "Pending"  # first observation not done yet
    INVALID = "Invalid"  # the spec does not validate; nothing is created or deleted until it does
    CREATING = "Creating"  # objects missing, materialising
    SCHEDULING = "Scheduling"  # waiting for the base gang to be scheduled
    STARTING = "Starting"  # scheduled, not every PodClique available yet
    AVAILABLE = "Available"
    BREACHED = "Breached"  # a breach is counting down (or held by pause)
    TERMINATING = "Terminating"
    SCALED_IN = "ScaledIn"  # terminal
    DELETED = "Deleted"  # terminal


class NudgeCarry(BaseModel):
    """What continue-as-new hands the next run of the nudge protocol (workflows/nudges.py). The watcher sends each
    change once: a nudge the previous run had not read when it handed over is never sent again, and the next run's
    first read may come from another worker's watch cache that lags behind what the previous run already read."""

    model_config = ConfigDict(extra="forbid")

    unread: dict[str, int] = Field(default_factory=dict, description="kind -> nudged resourceVersion not read yet")
    floor: dict[str, int] = Field(default_factory=dict,
                                  description="kind -> the resourceVersion reads from a watch cache had reached")
    fresh: bool = Field(default=False, description="a nudge no read from a watch cache can answer was pending")


class ReplicaState(BaseModel):
    """The replica workflow's durable state: the one object continue-as-new carries, whole (payload key `carry`).

    Mutable, unlike the messages: the workflow updates it in place. Fields are added with defaults, so a run
    started by older code continues on newer code; and a run started by newer code continues on older code, which
    drops the fields it does not know (`carried`)."""

    model_config = ConfigDict(extra="forbid")

    topology: ReplicaTopology | None = None
    release_after: ReleaseAfter = "Scheduled"
    memory: ReplicaMemory = Field(default_factory=ReplicaMemory)
    paused: bool = False
    pause_reason: str = ""
    incarnation: int = 1
    terminations: tuple[TerminationRecord, ...] = ()
    terminations_total: int = 0
    mirrored: dict[str, str] = Field(default_factory=dict, description="object name -> digest last mirrored")
    replica_available: bool | None = None
    phase: Phase = Phase.PENDING
    base_released_at: AwareDatetime | None = None
    scaled_released_at: AwareDatetime | None = None
    runs: int = Field(default=1, description="how many runs (continue-as-new generations) this replica has had")
    announced_breaches: dict[str, str] = Field(
        default_factory=dict, description="breached PodClique/PCSG -> breach start announced with an Event"
    )
    rollout: ReplicaRolloutCarry | None = Field(default=None, description="this replica's rolling update turn")
    nudges_total: int = Field(default=0, description="nudge signals received by all runs (counted from this field's "
                                                     "introduction)")
    nudges: NudgeCarry = Field(default_factory=NudgeCarry,
                               description="what the previous run was nudged about and had not read yet")
    deadline_fired: AwareDatetime | None = Field(
        default=None, description="the latest termination deadline a durable timer fired for (TIMER_JUDGED_PATCH)")
    progress_fired: AwareDatetime | None = Field(
        default=None, description="the latest rollout progressDeadline a durable timer fired for (same patch)")


class ReplicaInput(Message):
    ref: ReplicaRef
    carry: Annotated[ReplicaState | None, carried(ReplicaState)] = None
    safety_resync: timedelta = Field(
        default=timedelta(hours=6),
        description="re-read even without a nudge after this long (the watcher's resync is the main path)",
    )
    history_event_limit: int = Field(
        default=10_000, description="continue-as-new past this many events even if the server does not suggest it"
    )
    signal_limit: int = Field(default=SIGNALS_PER_RUN, ge=1,
                              description="continue-as-new once a run has received this many signals")
    update_limit: int = Field(default=UPDATES_PER_RUN, ge=1,
                              description="continue-as-new once a run has received this many updates")
    baseline: int | None = Field(
        default=None, ge=13,
        description="the patch baseline the run is begun under (workflows/patches.py), set by whoever begins it; "
                    "None: the run asks for patch markers, as runs begun by earlier releases did")


class ReplicaOutcome(Message):
    phase: Phase
    message: str
    terminations_total: int


# --- query ---------------------------------------------------------------------------------------------------
class CliqueStatus(Message):
    name: str
    present: bool
    pods: int
    ready: int
    scheduled: int
    gated: int
    min_available: int
    was_available: bool
    breached: str = Field(description="MinAvailableBreached status: True | False | Unknown")
    reason: str
    breach_start: datetime | None = None


class DeadlineStatus(Message):
    scope: Scope
    target: str
    breach_start: datetime
    delay: timedelta
    due_at: datetime
    cause: str


class DeadlineMemo(Message):
    """The replica's pending terminationDelay deadlines, in its workflow's memo (contract.DEADLINE_MEMO): what the
    fleet gauges read from one visibility listing, without a status query of each replica."""

    count: int = Field(ge=0)
    next_due: AwareDatetime | None = None


class ReplicaStatus(Message):
    ref: ReplicaRef
    phase: Phase
    paused: bool
    pause_reason: str = ""
    incarnation: int
    problems: tuple[str, ...] = ()
    cliques: tuple[CliqueStatus, ...] = ()
    deadlines: tuple[DeadlineStatus, ...] = ()
    base_gang_ready: bool = False
    waiting_for: tuple[str, ...] = ()
    terminations: tuple[TerminationRecord, ...] = ()
    terminations_total: int = 0
    held: tuple[str, ...] = Field(
        default=(), description="terminations due now but held back (paused, or the spec is invalid)"
    )
    rejected: tuple[str, ...] = Field(default=(), description="recent control requests that were rejected, why")
    observed_at: datetime | None = None
    runs: int = 1
    startup: tuple[str, ...] = Field(
        default=(), description="startup order still pending, e.g. 'p-0-decode waits for p-0-prefill Ready (1/2)'"
    )
    rollout: RolloutView | None = Field(default=None, description="the rolling update turn, while it has one")
    nudges: int = Field(default=0, description="nudge signals received by this run")
    signals: int = Field(default=0, description="signals (nudges included) received by this run")
    updates: int = Field(default=0, description="updates received by this run")
    history_events_counted: int = Field(
        default=0, description="this run's history length as the run counts it, to decide a hand-over by")
    nudges_total: int = Field(default=0, description="nudges received by all runs")
    scheduler_backend: str | None = Field(default=None, description="kube, kai or none, as last observed")


# --- reconciler --------------------------------------------------------------------------------------------------
class ReconcilerInput(Message):
    namespace: str | None = Field(default=None, description="watch one namespace; None for all")
    task_queue: str
    batch_size: int = Field(default=200, ge=1, le=1000)
    full_pass_every: timedelta = timedelta(minutes=10)
    pending: tuple[tuple[str, str], ...] = Field(default=(), description="PCS keys carried over continue-as-new")
    replica_safety_resync: timedelta = timedelta(hours=6)
    rollout_idle_resync: timedelta = timedelta(minutes=10)


class PcsBatchRequest(Message):
    namespace: str | None
    task_queue: str
    continue_token: str | None = None
    batch_size: int = 200
    only: tuple[tuple[str, str], ...] | None = Field(default=None, description="just these (namespace, name)")
    replica_safety_resync: timedelta = timedelta(hours=6)
    rollout_idle_resync: timedelta = Field(default=timedelta(minutes=10),
                                           description="for rollout workflows this request starts")


class PcsBatchResult(Message):
    continue_token: str | None = None
    seen: tuple[tuple[str, str], ...] = ()
    started: tuple[str, ...] = ()
    nudged: tuple[str, ...] = ()
    invalid: tuple[str, ...] = ()


class OrphanSweepRequest(Message):
    namespace: str | None
    seen: tuple[tuple[str, str], ...] = Field(description="every (namespace, name) the full pass listed")


ControlResult.model_rebuild()
