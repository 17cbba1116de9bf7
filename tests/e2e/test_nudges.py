"""Nudges: whether a nudge brings another round depends on what the history records, never on where in a workflow
task the signal happened to be applied. The watcher's nudges carry the resourceVersions of their events, and one
without versions brings a round from the apiserver, so a watcher whose clock differs from the activity worker's
(two worker replicas on two nodes) never has a change taken as already seen.

Seen in a seeded fault run (round 52, seed 1): after a Temporal restart and a worker kill, one worker applied a
nudge at a different point of the loop than a later replay did, and the replica workflow failed with a
nondeterminism error ("Timer machine does not handle this event: ActivityTaskScheduled").
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, pcs_manifest
from worker.history_activities import activity_names, patches_in
from worker.telemetry import client_interceptors
from worker.watcher import Watcher
from workflows.contract import NUDGE_SIGNAL
from workflows.messages import Nudge, Phase
from workflows.nudge_versions import sending
from workflows.nudges import UNVERSIONED_COUNTED_PATCH, VERSIONED_NUDGES_PATCH

if TYPE_CHECKING:
    from localstack.stack import LocalStack


async def _observes(handle: WorkflowHandle) -> int:  # type: ignore[type-arg]
    history = await handle.fetch_history()
    return sum(1 for name in activity_names(list(history.events))
               if name in ("observe_replica", "observe_replica_cached"))


async def _quiet(handle: WorkflowHandle, seconds: float = 3.0) -> int:  # type: ignore[type-arg]
    """The observe count once it has not changed for `seconds`."""
    last, since = await _observes(handle), asyncio.get_running_loop().time()
    while asyncio.get_running_loop().time() - since < seconds:
        await asyncio.sleep(0.5)
        now = await _observes(handle)
        if now != last:
            last, since = now, asyncio.get_running_loop().time()
    return last


async def test_a_nudge_without_versions_brings_one_round_from_the_apiserver_whatever_its_stamp_and_a_seen_one_none(
        cluster: Cluster, stack: LocalStack, worker_process: WorkerProcess, temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("nudged", cluster.namespace, cliques=[clique("app", 1, 1)]))
    await Replica(temporal_client, cluster, "nudged").wait_phase(Phase.AVAILABLE, timeout=60)
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("nudged", 0))
    history = await handle.fetch_history()
    assert UNVERSIONED_COUNTED_PATCH in patches_in(list(history.events)), "a new workflow counts such nudges"

    # Stamped an hour ago (a watcher whose clock is behind): no stamp is compared with the activity worker's clock.
    before = await _quiet(handle)
    await handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC) - timedelta(hours=1)))
    after = await _quiet(handle)
    assert after == before + 1, f"one round for a nudge without versions: {before} -> {after}"
    history = await handle.fetch_history()
    assert activity_names(list(history.events))[-1] == "observe_replica", "read from the apiserver, not a cache"

    await handle.signal(NUDGE_SIGNAL)  # untimed (an older sender): one more round too
    assert await _quiet(handle) == after + 1

    # A nudge whose event the last read already saw brings nothing (versions travel in a header).
    versioned = await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter,
                                     interceptors=client_interceptors())
    with sending({"Pod": 1}):
        await versioned.get_workflow_handle(handle.id).signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
    assert await _quiet(handle) == after + 1, "a nudge for an event already read is covered"


async def test_a_watcher_an_hour_behind_the_activity_worker_still_has_every_change_seen(
        cluster: Cluster, stack: LocalStack, temporal_client: Client, tmp_path: Path, histories: Histories) -> None:
    """The worker runs workflows and activities only (`--no-watcher`); the watcher runs here, its clock an hour
    behind. By the clock every nudge it sends predates the observation in force and would be taken as seen (the
    replica would stall); by resourceVersions each change brings its round."""
    worker = WorkerProcess(kubeconfig=Path(stack.kubeconfig), temporal_address=stack.temporal_address,
                           namespace=cluster.namespace, log_dir=tmp_path, extra_args=["--no-watcher"]).start()
    client = await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter,
                                  interceptors=client_interceptors())  # as the worker's
    watcher = Watcher(cluster.kube, client, namespace=cluster.namespace,
                      clock=lambda: datetime.now(UTC) - timedelta(hours=1))
    watching = asyncio.create_task(watcher.run())
    try:
        await asyncio.to_thread(worker.wait_ready, 90.0, False)
        cluster.apply(pcs_manifest("skewed", cluster.namespace, termination_delay="600s",
                                   cliques=[clique("app", 2, 2)]))
        replica = Replica(temporal_client, cluster, "skewed")
        await replica.wait_phase(Phase.AVAILABLE, timeout=90)
        history = await replica.handle.fetch_history()
        assert VERSIONED_NUDGES_PATCH in patches_in(list(history.events))
        for attempt in range(3):
            cluster.fail_readiness("skewed-0-app-1")
            await replica.wait(lambda s: bool(s.deadlines), timeout=20, what=f"breach {attempt + 1} seen")
            cluster.fail_readiness("skewed-0-app-1", failing=False)
            await replica.wait(lambda s: not s.deadlines, timeout=20, what=f"breach {attempt + 1} healed")
        await histories.keep(replica.handle, "skewed_watcher_versioned_nudges")  # replays with the header read
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
        watcher.close()
        worker.stop()
