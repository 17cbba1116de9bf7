"""SIGTERM drains: an activity in flight when the worker is told to stop finishes before the worker exits.

To hold an activity in flight for real, the kube-apiserver is frozen (SIGSTOP): the activity's request is accepted
by the kernel and waits. The worker gets SIGTERM, the apiserver is thawed a few seconds later, and the activity
must complete (not be cancelled or time out) before the worker exits cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError

from localstack import rundirs
from localstack.binaries import path_of
from localstack.processes import ProcessRegistry
from localstack.stack import LocalStack
from localstack.temporal import TemporalDevServer
from tests.e2e.harness import (
    Cluster,
    WorkerProcess,
    await_for,
    clique,
    http_get,
    observe_held_in_flight,
    pcs_manifest,
    wait_for,
)
from workflows.contract import reconciler_workflow_id
from workflows.messages import Phase, ReplicaStatus

HOLD_SECONDS = 3.0




async def test_sigterm_lets_in_flight_activities_finish(stack: LocalStack, cluster: Cluster,
                                                        worker_process: WorkerProcess,
                                                        temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("drain", cluster.namespace, cliques=[clique("a", 1, 1)]))
    wait_for(lambda: cluster.ready_pods(1), timeout=60, what="1 Ready pod")
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("drain", 0))

    async def available() -> bool:
        status: ReplicaStatus = await handle.query("status", result_type=ReplicaStatus)
        return status.phase is Phase.AVAILABLE

    await await_for(available, timeout=20, what="Available")
    async with observe_held_in_flight(stack, handle, timeout=20):
        assert worker_process.proc is not None
        os.killpg(worker_process.proc.pid, signal.SIGTERM)
        told = time.monotonic()
        time.sleep(HOLD_SECONDS)
        assert worker_process.proc.poll() is None, "the worker must wait for its in-flight activity"
    code = worker_process.proc.wait(60)
    took = time.monotonic() - told
    assert code == 0, worker_process.logs()[-3000:]
    assert HOLD_SECONDS <= took < 20 + 10, f"exited {took:.1f}s after SIGTERM"
    history = await handle.fetch_history()
    kinds = [e.event_type for e in history.events]
    last_scheduled = max(i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
    after = kinds[last_scheduled:]
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED in after, "the in-flight activity completed"
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT not in after
    assert EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED not in after
    print(f"worker exited {took:.1f}s after SIGTERM (apiserver held {HOLD_SECONDS}s)")


async def test_a_worker_started_while_temporal_is_down_waits_for_it(
        stack: LocalStack, namespace: str, crds: list[str], tmp_path: Path) -> None:
    """A worker (re)started during a Temporal restart must wait for Temporal, not exit: an exit leaves the replicas
    without a worker until something restarts the process (seen in the seeded fault runs)."""
    registry = ProcessRegistry(tmp_path)
    registry.claim(rundirs.owner_token())
    server = TemporalDevServer(path_of("temporal"), tmp_path, registry, name="temporal-late")
    process = WorkerProcess(kubeconfig=Path(stack.kubeconfig), temporal_address=server.address,
                            namespace=namespace, log_dir=tmp_path).start()
    try:
        # The wait is logged once the worker has started (seconds of imports on a loaded machine: no fixed sleep).
        await await_for(lambda: "Temporal not reachable" in process.logs(), timeout=60, interval=0.5,
                        what="the worker logs that it waits for Temporal")
        assert process.proc is not None and process.proc.poll() is None, process.logs()[-3000:]
        # Live (a liveness probe must not restart a worker that only waits for Temporal) but not ready.
        assert http_get(process.http_port, "/healthz") == (200, "ok\n")
        code, body = http_get(process.http_port, "/readyz")
        assert code == 503 and json.loads(body)["temporal"] == "not reached yet", body
        server.start()
        server.wait_ready()
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)
        handle = client.get_workflow_handle(reconciler_workflow_id(namespace))

        async def reconciler_running() -> bool:
            try:
                return (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
            except RPCError:
                return False

        await await_for(reconciler_running, timeout=60, what="the worker connected and started its reconciler")
        assert process.proc.poll() is None
        await await_for(lambda: http_get(process.http_port, "/readyz")[0] == 200, timeout=30, interval=1,
                        what="/readyz 200 once Temporal answers")
    finally:
        process.stop()
        server.stop()
