"""Messages of rolling updates (DESIGN §4.9): between the PCS-level rollout workflow, the replica workflows, the
rollout activities and the CLI. Small pydantic models, stored in history; no Kubernetes types."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, BeforeValidator, ConfigDict, Field

from grove.rollout import ProgressMark, ReplicaRollout


def carried(model: type[BaseModel]) -> BeforeValidator:
    """Read a state that continue-as-new carried, ignoring fields this code does not know, at every depth.

    A run begun by a newer worker carries fields an older one lacks (during a rollback or a mixed-version rollout);
    rejecting them would fail the run's first workflow task until a newer worker takes it. Messages stay strict:
    this applies only to carried state, which only workflows write. Fields added to a carry have defaults, so the
    newer code reads them back as not yet known."""

    def read(value: Any) -> Any:
        return model.model_validate(value, extra="ignore") if isinstance(value, dict) else value

    return BeforeValidator(read)


class Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PcsRef(Message):
    namespace: str
    pcs: str
    pcs_uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pcs}"


# --- coordinator <-> replica workflows ------------------------------------------------------------------------
class RolloutTurn(Message):
    """The rollout workflow's grant to one replica workflow: recreate towards `generation_hash` now.

    A replica keeps the grant with the highest `seq`; a new seq (retarget, resume) restarts its progress clock."""

    seq: int = Field(ge=1)
    generation_hash: str
    granted_at: AwareDatetime
    paused: bool = False
    revoked: bool = Field(default=False, description="no turn any more (OnDelete, or the rollout was withdrawn)")


class TurnReport(Message):
    """A replica workflow tells the rollout workflow how its turn ended."""

    replica: int
    seq: int
    generation_hash: str
    outcome: str = Field(description="done | halted")
    message: str = ""
    at: AwareDatetime


class ReplicaRolloutCarry(Message):
    """A replica workflow's rollout state, carried across continue-as-new."""

    turn: RolloutTurn | None = None
    marks: dict[str, ProgressMark] = Field(default_factory=dict)
    halted: str = Field(default="", description="why recreation stopped (progressDeadline), for this turn")
    reported: int = Field(default=0, description="the last turn seq reported to the rollout workflow")
    last_step: str = Field(default="", description="what the last step did or waits for, for humans")


class RolloutView(Message):
    """A replica's rollout as the status query and the UI show it."""

    seq: int
    generation_hash: str
    paused: bool = False
    halted: str = ""
    in_progress: tuple[str, ...] = ()
    last_step: str = ""


# --- the rollout workflow ---------------------------------------------------------------------------------------
class RolloutSnapshot(Message):
    """The PCS as the rollout workflow sees it, in one read."""

    pcs_state: str = Field(description="Present | Absent | Replaced | Deleting (workflows.messages.PcsState)")
    valid: bool = False
    problems: tuple[str, ...] = ()
    strategy: str = "RollingRecreate"
    generation_hash: str = ""
    wanted_replicas: int = 0
    replicas: tuple[ReplicaRollout, ...] = ()
    updated_pod_cliques: int = 0
    total_pod_cliques: int = 0
    updated_scaling_groups: int = 0
    total_scaling_groups: int = 0


class RolloutStep(Message):
    """One entry of the rollout log."""

    at: AwareDatetime
    what: str


class RolloutState(Message):
    """Everything the rollout workflow remembers (carried across continue-as-new)."""

    target_hash: str = ""
    seq: int = 0
    current: int | None = Field(default=None, description="the replica whose turn it is")
    current_since: AwareDatetime | None = None
    paused: bool = False
    pause_reason: str = ""
    halted: str = ""
    started_at: AwareDatetime | None = None
    ended_at: AwareDatetime | None = None
    done_replicas: tuple[int, ...] = Field(default=(), description="replicas whose turn ended for target_hash")
    log: tuple[RolloutStep, ...] = ()
    mirrored: str = ""
    announced: str = Field(default="", description="the last rollout Event key, so none repeats")


class RolloutInput(Message):
    ref: PcsRef
    state: Annotated[RolloutState | None, carried(RolloutState)] = None
    idle_resync: timedelta = timedelta(minutes=10)
    active_resync: timedelta = timedelta(seconds=30)
    history_event_limit: int = 5_000


class RolloutStatusMirror(Message):
    """PCS status fields the rollout workflow owns."""

    ref: PcsRef
    updated_replicas: int
    generation_hash: str
    update_progress: dict[str, object] | None = None
    condition_status: str = Field(description="UpdateInProgress condition: True | False | Unknown")
    condition_reason: str
    condition_message: str


class RolloutEvent(Message):
    ref: PcsRef
    reason: str
    message: str
    type: str = "Normal"


class RolloutStatus(Message):
    """What `grove-temporal rollout status` prints."""

    ref: PcsRef
    strategy: str = "RollingRecreate"
    generation_hash: str = ""
    phase: str = Field(description="Pending | Idle | Rolling | Paused | Halted | Complete | Invalid")
    current: int | None = None
    current_since: datetime | None = None
    paused: bool = False
    pause_reason: str = ""
    halted: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    updated_replicas: int = 0
    replicas: tuple[ReplicaRollout, ...] = ()
    log: tuple[RolloutStep, ...] = ()
    problems: tuple[str, ...] = ()


class RolloutControl(Message):
    reason: str = Field(default="", max_length=1024)


class RolloutControlResult(Message):
    accepted: bool
    message: str
