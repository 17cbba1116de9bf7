"""A gang termination that falls due while kube-apiserver is down comes as soon as it answers again.

Before, the attempts that met the outage backed off by Temporal's policy (1 s doubling to 30 s), so the next came
up to 30 s after kube-apiserver was back. Now each attempt waits for kube-apiserver to answer /readyz and asks for
its next attempt at once (activities/reachability.py). Checked from the workflow history: every activity attempt
that met the outage named its next attempt's delay (none was left to the policy's back-off). How long after
kube-apiserver answered the termination came is printed, not asserted.

The same across a network partition (the worker's packets to kube-apiserver dropped, not refused), where a request
hangs: it now ends with its activity attempt, as unreachable, instead of waiting out the client's timeout four times.

Each test has a stack of its own: kube-apiserver is stopped, which the session's shared stack should not see.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.kubeapi import Kube
from activities.reachability import RETRY_WHEN_BACK, RETRY_WHILE_DOWN
from activities.replica import UNREACHABLE
from bench.cluster import NAMESPACES, SERVICEACCOUNTS
from faults.injector import worker_argv
from faults.partition import Partitions
from localstack.crds import apply_crds
from localstack.stack import LocalStack, StackOptions, running_stack
from localstack.workerproc import WorkerProcess
from tests.e2e.harness import Cluster, Replica, clique, pcs_manifest, wait_for
from workflows.messages import DeadlineStatus, Phase

pytestmark = pytest.mark.stack  # starts real stack components of its own

DELAY_S = 3
# kube-apiserver stays down this long after the deadline: Temporal's back-off alone would by then wait 8-16 s
# between attempts.
DOWN_AFTER_DEADLINE_S = 18


@pytest.fixture
def outage_stack() -> Iterator[LocalStack]:
    """A stack per test: after kube-apiserver was stopped, kube-controller-manager and kube-scheduler may exit (they
    lose their leases), and the next test would find no default ServiceAccount made for its namespace."""
    with running_stack(StackOptions(nodes=1)) as stack:
        yield stack


@pytest_asyncio.fixture(loop_scope="module")
async def temporal(outage_stack: LocalStack) -> AsyncIterator[Client]:
    yield await Client.connect(outage_stack.temporal_address, data_converter=pydantic_data_converter)


def _namespace(stack: LocalStack, namespace: str) -> Cluster:
    api_client = stack.kube_client()
    apply_crds(api_client)
    kube = Kube(api_client)
    kube.create(NAMESPACES, None, {"metadata": {"name": namespace}})
    wait_for(lambda: kube.get(SERVICEACCOUNTS, namespace, "default"), timeout=30, what="default ServiceAccount")
    return Cluster(kube, namespace)


async def _breached(cluster: Cluster, temporal: Client, pcs: str) -> tuple[Replica, DeadlineStatus]:
    """A replica of one clique of two pods, Available, then one pod NotReady: its deadline, DELAY_S away."""
    cluster.apply(pcs_manifest(pcs, cluster.namespace, termination_delay=f"{DELAY_S}s",
                               cliques=[clique("frontend", 2, 2)]))
    wait_for(lambda: cluster.ready_pods(2), timeout=90, what="2 Ready pods")
    replica = Replica(temporal, cluster, pcs)
    await replica.wait_phase(Phase.AVAILABLE, timeout=60)
    cluster.fail_readiness(f"{pcs}-0-frontend-1")
    return replica, (await replica.wait(lambda s: bool(s.deadlines), what="deadline")).deadlines[0]


async def _past_deadline(deadline: DeadlineStatus) -> None:
    await asyncio.sleep(max(0.0, (deadline.due_at - datetime.now(UTC)).total_seconds()) + DOWN_AFTER_DEADLINE_S)


async def _terminated_once(replica: Replica, deadline: DeadlineStatus, since: float, what: str) -> None:
    status = await replica.wait(lambda s: s.terminations_total > 0, timeout=150, what="the termination")
    assert status.terminations_total == 1
    record = status.terminations[0]
    assert record.at >= deadline.due_at, "never before the deadline"
    print(f"\nthe workflow terminated {record.at.timestamp() - since:.2f} s after {what}, "
          f"{(record.at - deadline.due_at).total_seconds():.1f} s after its deadline")


async def test_a_termination_due_during_an_outage_is_retried_as_soon_as_kube_apiserver_answers(
        outage_stack: LocalStack, temporal: Client, tmp_path: Path) -> None:
    cluster = _namespace(outage_stack, "outage")
    worker = WorkerProcess(kubeconfig=Path(outage_stack.kubeconfig), temporal_address=outage_stack.temporal_address,
                           namespace=cluster.namespace, log_dir=tmp_path).start()
    try:
        replica, deadline = await _breached(cluster, temporal, "down")
        outage_stack.stop_component("kube-apiserver")
        await _past_deadline(deadline)
        outage_stack.start_component("kube-apiserver")
        await _terminated_once(replica, deadline, time.time(), "kube-apiserver answered again")

        history = await replica.handle.fetch_history()
        retried = [e.activity_task_started_event_attributes for e in history.events
                   if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
                   and e.activity_task_started_event_attributes.attempt > 1]
        assert retried, "no activity was retried across the outage"
        failures = [a.last_failure.application_failure_info for a in retried]
        assert all(f.type == UNREACHABLE for f in failures), failures
        # Every attempt that met the outage named its next one: at once, or in a second while still down; none was
        # left to the policy's back-off (which names no delay).
        asked = [f.next_retry_delay.ToTimedelta() for f in failures]
        assert all(d in (RETRY_WHEN_BACK, RETRY_WHILE_DOWN) for d in asked), asked
        print(f"retried activities: {len(retried)}, attempts {[a.attempt for a in retried]}, "
              f"their last failed attempts asked for {[d.total_seconds() for d in asked]} s")
    finally:
        worker.stop()


@pytest.fixture
def partitions() -> Iterator[Partitions]:
    made = Partitions()
    why = made.unavailable()
    if why is not None:
        made.cleanup()
        pytest.skip(f"no network partitions on this machine: {why}")
    try:
        yield made
    finally:
        made.cleanup()


async def test_a_termination_due_during_a_partition_from_kube_apiserver_comes_soon_after_it_heals(
        outage_stack: LocalStack, temporal: Client, partitions: Partitions) -> None:
    cluster = _namespace(outage_stack, "partition")
    argv = worker_argv(Path(outage_stack.kubeconfig), outage_stack.temporal_address, cluster.namespace,
                       f"tq-{cluster.namespace}")
    worker = outage_stack.spawn("partitioned-worker", partitions.wrap("partitioned-worker", argv))
    assert outage_stack.apiserver is not None
    port = outage_stack.apiserver.port
    try:
        replica, deadline = await _breached(cluster, temporal, "cut")
        partitions.drop("partitioned-worker", port)
        await _past_deadline(deadline)
        partitions.heal("partitioned-worker", port)
        # A request lost in the partition gives up after 10 s of silence, so the attempt waits for /readyz: about
        # 0.5 s after the heal at this length, where it came through on TCP's retransmission 8.7-8.9 s after it
        # before (a 30 s total timeout); 40 s after the deadline: 0.3 s, against 1.4-1.5 s before.
        await _terminated_once(replica, deadline, time.time(), "the partition healed")
    finally:
        partitions.heal("partitioned-worker", port)
        worker.stop()
