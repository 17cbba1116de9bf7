"""The batch reconciler: makes sure every wanted PCS replica has its replica workflow, and nothing more.

It is a plain long-running workflow (one per watched scope), not a parent: replica workflows are started with
conflict policy "use existing", so the reconciler can be restarted, continue-as-new or run twice without ever
creating a second workflow for a replica. The watcher signals it with the PodCliqueSets that changed; a full pass
over all PodCliqueSets in batches runs every `full_pass_every` to cover anything missed, and afterwards a sweep
nudges running replica workflows whose PCS or index is gone, so they can scale in or complete.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from workflows.contract import (
        ACTIVITY_HEARTBEAT_TIMEOUT,
        ACTIVITY_HEARTBEATS_PATCH,
        PCS_CHANGED_SIGNAL,
        RECONCILER_WORKFLOW,
    )
    from workflows.messages import OrphanSweepRequest, PcsBatchRequest, PcsBatchResult, ReconcilerInput

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))
TIMEOUT = timedelta(minutes=5)


@workflow.defn(name=RECONCILER_WORKFLOW)
class ReconcilerWorkflow:
    @workflow.init
    def __init__(self, input: ReconcilerInput) -> None:
        self.input = input
        self.pending: set[tuple[str, str]] = {tuple(k) for k in input.pending}  # type: ignore[misc]
        self.full_pass_due = True
        self.passes = 0
        self._heartbeat_timeout: timedelta | None = None  # decided once per run, by ACTIVITY_HEARTBEATS_PATCH

    @workflow.run
    async def run(self, input: ReconcilerInput) -> None:
        if workflow.patched(ACTIVITY_HEARTBEATS_PATCH):
            # A batch lost with its worker held every PodCliqueSet change behind it for the five minutes of
            # start_to_close (fault run seed 4: a rolling update started minutes late).
            self._heartbeat_timeout = ACTIVITY_HEARTBEAT_TIMEOUT
        while True:
            if workflow.info().is_continue_as_new_suggested() or workflow.info().get_current_history_length() > 5000:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(input.model_copy(update={"pending": tuple(sorted(self.pending))}))
            if self.pending:
                batch = sorted(self.pending)[: input.batch_size]
                self.pending -= set(batch)
                await self._sync(PcsBatchRequest(namespace=input.namespace, task_queue=input.task_queue,
                                                 only=tuple(batch), batch_size=input.batch_size,
                                                 replica_safety_resync=input.replica_safety_resync,
                                                 rollout_idle_resync=input.rollout_idle_resync),
                                 f"sync {len(batch)} changed PodCliqueSets")
                continue
            if self.full_pass_due:
                await self._full_pass(input)
                continue
            try:
                await workflow.wait_condition(lambda: bool(self.pending) or self.full_pass_due,
                                              timeout=input.full_pass_every, timeout_summary="next full pass")
            except TimeoutError:
                self.full_pass_due = True

    async def _full_pass(self, input: ReconcilerInput) -> None:
        token: str | None = None
        batches = 0
        while True:
            batches += 1
            result = await self._sync(
                PcsBatchRequest(namespace=input.namespace, task_queue=input.task_queue, continue_token=token,
                                batch_size=input.batch_size, replica_safety_resync=input.replica_safety_resync,
                                rollout_idle_resync=input.rollout_idle_resync),
                f"full pass batch {batches}",
            )
            token = result.continue_token
            if not token:
                break
        await workflow.execute_activity(
            "sweep_replica_workflows", OrphanSweepRequest(namespace=input.namespace, seen=()),
            result_type=int, start_to_close_timeout=TIMEOUT, heartbeat_timeout=self._heartbeat_timeout,
            retry_policy=RETRY,
            summary="nudge replica workflows whose PodCliqueSet or index is gone",
        )
        self.full_pass_due = False
        self.passes += 1

    async def _sync(self, request: PcsBatchRequest, summary: str) -> PcsBatchResult:
        result: PcsBatchResult = await workflow.execute_activity(
            "sync_pcs_batch", request, result_type=PcsBatchResult, start_to_close_timeout=TIMEOUT,
            heartbeat_timeout=self._heartbeat_timeout,
            retry_policy=RETRY, summary=summary,
        )
        if result.started:
            workflow.logger.info("started %d replica workflows", len(result.started))
        return result

    @workflow.signal(name=PCS_CHANGED_SIGNAL)
    def pcs_changed(self, keys: list[list[str]]) -> None:
        """The watcher saw these (namespace, name) PodCliqueSets change."""
        self.pending |= {(k[0], k[1]) for k in keys if len(k) == 2}

    @workflow.signal(name="full_pass")
    def request_full_pass(self) -> None:
        self.full_pass_due = True

    @workflow.query(name="pending")
    def pending_keys(self) -> list[list[str]]:
        return [list(k) for k in sorted(self.pending)]
