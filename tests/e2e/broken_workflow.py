"""Deliberately broken builds of the replica workflow, for the stuck-workflow tests (run by tests/e2e/broken_build.py).

- `ExtraTimerReplicaWorkflow` replays every history the real build wrote, but when it decides anew it first sleeps
  on an extra timer before each wait: the classic "is_replaying" bug. A history it extends no longer replays with
  the real build (nondeterminism), so a replica it ran is stuck once the real build is back.
- `RaisingReplicaWorkflow` raises in every round: each of its workflow tasks fails, the history stays as it was.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from workflows.contract import REPLICA_WORKFLOW
    from workflows.messages import ReplicaInput, ReplicaOutcome
    from workflows.replica import ReplicaWorkflow

EXTRA_TIMER_SUMMARY = "broken build: an extra timer"
RAISED = "broken build: this round always fails"


@workflow.defn(name=REPLICA_WORKFLOW)
class ExtraTimerReplicaWorkflow(ReplicaWorkflow):
    @workflow.run
    async def run(self, input: ReplicaInput) -> ReplicaOutcome:
        return await super().run(input)

    async def _wait(self) -> None:
        if not workflow.unsafe.is_replaying():
            await workflow.sleep(timedelta(milliseconds=1), summary=EXTRA_TIMER_SUMMARY)
        await super()._wait()


@workflow.defn(name=REPLICA_WORKFLOW)
class RaisingReplicaWorkflow(ReplicaWorkflow):
    @workflow.run
    async def run(self, input: ReplicaInput) -> ReplicaOutcome:
        return await super().run(input)

    async def _round(self) -> ReplicaOutcome | None:
        raise RuntimeError(RAISED)


BUILDS: dict[str, type[ReplicaWorkflow]] = {"extra-timer": ExtraTimerReplicaWorkflow, "raise": RaisingReplicaWorkflow}
