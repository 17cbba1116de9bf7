"""After a lone worker restarts on the same host: its predecessor's workflows go back to the shared task queue at once.

Temporal hands a workflow's next task to the sticky queue of the worker that ran its last one (that worker has it
cached). With that worker dead, each task waits there for the sticky schedule-to-start timeout (worker/config.py:
sticky_timeout) before the shared queue gets it: after a restart every replica's first task waited it out (B5 with
one worker: 3 s of the recovery). A worker that took the watcher's Lease from a holder of this host whose process is
gone (worker/leader.py) knows that holder is dead; if no other worker polls the task queue, every running workflow's
sticky queue is the dead worker's or none, so it resets them all (ResetStickyTaskQueue) before its watcher nudges
anything. Beside live workers it resets nothing: it cannot tell their workflows from the dead one's, and a reset
workflow may go to a worker that has to replay it.
"""

from __future__ import annotations

import asyncio
import logging
import time

from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest, ResetStickyTaskQueueRequest
from temporalio.client import Client
from temporalio.service import RPCError

log = logging.getLogger(__name__)

# A live worker long-polls the shared queue without a break; a poll lasts up to about a minute, and the server
# lists a poller for minutes after its last one. Pollers seen this recently count as live workers.
LIVE_POLLER_SECONDS = 90.0
CONCURRENCY = 32
# The watcher waits for this before it nudges: bounded, so that a slow Temporal delays the leader's nudges by no more
# than the sticky timeout they would otherwise wait out several times over.
TIME_LIMIT_SECONDS = 10.0


async def other_pollers(client: Client, task_queue: str, identity: str, dead: str) -> set[str]:
    """Identities polling the task queue's workflow tasks lately, other than this worker and the dead holder."""
    response = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
        namespace=client.namespace, task_queue=TaskQueue(name=task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW))
    now = time.time()
    return {p.identity for p in response.pollers
            if p.identity not in (identity, dead) and now - p.last_access_time.ToSeconds() < LIVE_POLLER_SECONDS}


async def release_dead_workers_workflows(client: Client, task_queue: str, identity: str, dead: str) -> int:
    """Reset the sticky queue of every running workflow on `task_queue` when this worker is the only live one there
    (`dead`: the Lease holder of this host whose process is gone). Returns how many were reset; failures and the time
    limit are logged and cost only the wait they would have saved."""
    try:
        return await asyncio.wait_for(_release(client, task_queue, identity, dead), TIME_LIMIT_SECONDS)
    except TimeoutError:
        log.warning("dead worker %s: sticky queues not all reset within %.0fs; the rest wait out the sticky timeout",
                    dead, TIME_LIMIT_SECONDS)
        return 0


async def _release(client: Client, task_queue: str, identity: str, dead: str) -> int:
    try:
        others = await other_pollers(client, task_queue, identity, dead)
        if others:
            log.info("dead worker %s: other workers poll %s (%s); their workflows keep their sticky queues",
                     dead, task_queue, ", ".join(sorted(others)))
            return 0
        began = time.monotonic()
        gate = asyncio.Semaphore(CONCURRENCY)

        async def reset(workflow_id: str, run_id: str) -> None:
            async with gate:
                await client.workflow_service.reset_sticky_task_queue(ResetStickyTaskQueueRequest(
                    namespace=client.namespace, execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id)))

        resets = [reset(w.id, w.run_id) async for w in client.list_workflows(
            f'TaskQueue="{task_queue}" AND ExecutionStatus="Running"')]
        outcomes = await asyncio.gather(*resets, return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        log.info("dead worker %s: reset the sticky queue of %d running workflows in %.2fs%s", dead,
                 len(outcomes) - len(failed), time.monotonic() - began,
                 f" ({len(failed)} failed: {failed[0]})" if failed else "")
        return len(outcomes) - len(failed)
    except RPCError as err:
        log.warning("dead worker %s: sticky queues not reset (%s); its workflows wait out the sticky timeout",
                    dead, err)
        return 0
