"""The control queue of the replica workflow: pause, resume and force-terminate, as signals or as updates.

Pause and resume change the durable state at once. A force-terminate request is validated against the topology,
queued with a ticket, and carried out by the main loop (forced requests go first and ignore pause and delay); an
update waits for its ticket's result, a signal's rejection is kept for the status query. Requests still queued when
the workflow completes are rejected, never dropped. Transient except the pause, which lives in ReplicaState.

Deterministic (workflow code).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from grove.termination import Termination, forced_termination
    from grove.topology import ReplicaTopology
    from workflows.messages import (
        ControlResult,
        ForceTerminateRequest,
        PauseRequest,
        ReplicaRef,
        ReplicaState,
        TerminationRecord,
    )

REJECTIONS_KEPT = 10


def pause(state: ReplicaState, request: PauseRequest) -> bool:
    """Pause (again, with this reason); True if it was paused already."""
    was = state.paused
    if not was:
        workflow.logger.info("paused: %s", request.reason or "(no reason given)")
    state.paused, state.pause_reason = True, request.reason
    return was


def resume(state: ReplicaState) -> bool:
    """Resume; True if it was paused."""
    was = state.paused
    if was:
        workflow.logger.info("resumed")
    state.paused, state.pause_reason = False, ""
    return was


def forced_plan(topology: ReplicaTopology, request: ForceTerminateRequest) -> Termination:
    """The termination a force-terminate request asks for; ValueError naming what is wrong with it."""
    scaling_group = request.scaling_group
    if scaling_group is not None:
        for group in topology.scaling_groups:
            if scaling_group in (group.name, group.config_name):
                scaling_group = group.name
                break
    if request.scaling_group is None and request.scaling_group_replica is not None:
        raise ValueError("scaling_group_replica given without scaling_group")
    return forced_termination(topology, workflow.now(), request.reason or "no reason given", scaling_group,
                              request.scaling_group_replica)


def validate_force(ref: ReplicaRef, topology: ReplicaTopology | None, request: ForceTerminateRequest) -> None:
    if topology is None:
        raise ValueError(f"replica {ref} has no valid spec yet: there is nothing to terminate")
    forced_plan(topology, request)


class ControlQueue:
    """Queued force-terminate requests (by ticket), their results, and the rejections the status query shows."""

    def __init__(self) -> None:
        self.forced: deque[tuple[int, ForceTerminateRequest]] = deque()
        self.results: dict[int, ControlResult] = {}
        self.tickets = 0  # how many requests were ever queued this run: a new one wakes a backing-off loop
        self.rejected: deque[str] = deque(maxlen=REJECTIONS_KEPT)

    def queued(self) -> bool:
        return bool(self.forced)

    def enqueue(self, request: ForceTerminateRequest) -> int:
        self.tickets += 1
        self.forced.append((self.tickets, request))
        return self.tickets

    def reject_signal(self, err: ValueError) -> None:
        self.rejected.append(f"force_terminate: {err}")
        workflow.logger.warning("force_terminate signal rejected: %s", err)

    async def result(self, ticket: int) -> ControlResult:
        await workflow.wait_condition(lambda: ticket in self.results)
        return self.results.pop(ticket)

    def next_forced(self, plan: Callable[[ForceTerminateRequest], Termination]) -> Termination | None:
        """The first queued request that still makes sense, as a termination; those that no longer do (the topology
        changed since they were queued) are rejected on the way."""
        while self.forced:
            ticket, request = self.forced[0]
            try:
                return plan(request)
            except ValueError as err:
                self.forced.popleft()
                self.results[ticket] = ControlResult(accepted=False, message=str(err))
                self.rejected.append(f"force_terminate: {err}")
        return None

    def carried_out(self, what: str, record: TerminationRecord) -> None:
        """The first queued request was carried out."""
        ticket, _ = self.forced.popleft()
        self.results[ticket] = ControlResult(accepted=True, message=f"terminated {what}", termination=record)

    def reject_all(self, why: str) -> None:
        while self.forced:
            ticket, _ = self.forced.popleft()
            self.results[ticket] = ControlResult(accepted=False, message=why)
