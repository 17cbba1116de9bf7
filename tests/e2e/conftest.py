"""Fixtures of the end-to-end tests: a namespace with the CRDs, a Cluster view of it, and a real worker process
driving only that namespace (its own task queue and lease), so tests can kill and restart workers in isolation."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests import histories as recorded
from tests.e2e.harness import Cluster, Timeline, WorkerProcess, bounded
from worker.doctor import has_a_workflow_task

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from temporalio.client import Client, WorkflowHandle

    from localstack.stack import LocalStack


@pytest.fixture
def cluster(kube: ApiClient, crds: list[str], namespace: str) -> Cluster:
    from activities.kubeapi import Kube

    return Cluster(Kube(kube), namespace)


@pytest.fixture
def timeline(cluster: Cluster) -> Iterator[Timeline]:
    """When (wall clock) pods and PodCliques of the test namespace were seen, released, scheduled, Ready, deleted."""
    watching = Timeline(cluster.kube, cluster.namespace).start()
    try:
        yield watching
    finally:
        watching.stop()


@contextlib.contextmanager
def running_worker(stack: LocalStack, namespace: str, request: pytest.FixtureRequest, *,
                   kubeconfig: Path | None = None, extra_env: dict[str, str] | None = None) -> Iterator[WorkerProcess]:
    """A worker process driving only `namespace`, stopped afterwards; its log printed if the test failed."""
    log_dir = Path(stack.run_dir) / "test-workers"
    log_dir.mkdir(parents=True, exist_ok=True)
    process = WorkerProcess(kubeconfig=kubeconfig or Path(stack.kubeconfig), temporal_address=stack.temporal_address,
                            namespace=namespace, log_dir=log_dir, extra_env=extra_env or {}).start()
    try:
        yield process
    finally:
        process.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(f"--- worker log ({process.log_path.parent}) ---\n{process.logs()[-20000:]}")


@pytest.fixture
def worker_process(stack: LocalStack, namespace: str, crds: list[str],
                   request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    with running_worker(stack, namespace, request) as process:
        yield process


REPLAY_TIMEOUT_SECONDS = 120.0


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)


class Histories:
    """Replays what a test drove (a non-deterministic workflow change fails the run that exposed it) and, with
    --record-histories, keeps it as a replay fixture."""

    def __init__(self, record: bool, client: Client) -> None:
        self.record = record
        self.client = client
        self.kept: list[str] = []

    async def keep(self, handle: WorkflowHandle, name: str) -> None:  # type: ignore[type-arg]
        """The run the handle names, or without a run id every run of the workflow: a replica hands over by
        continue-as-new once quiet, so what the test drove may be spread over several runs. Recorded oldest first, as
        `name`, `name-run2`, ..."""
        if handle.run_id:
            runs = [await bounded(lambda: handle.fetch_history(rpc_timeout=recorded.FETCH_TIMEOUT),
                                  f"history of {handle.id}")]
        else:
            runs = list(reversed(await bounded(lambda: recorded.run_histories(self.client, handle.id),
                                               f"histories of {handle.id}")))
        for number, history in enumerate(runs, start=1):
            if not has_a_workflow_task(history):  # a run just begun (a hand-over as the test ended): nothing yet
                print(f"run {number} of {handle.id} has no workflow task yet: not replayed, not recorded")
                continue
            # Milliseconds each; bounded, so that a replay that is merely slow names itself (one that hangs in the
            # SDK's core ignores the cancellation: has_a_workflow_task above is what keeps that one out). Not made
            # again: a replay depends on nothing outside this process.
            await bounded(functools.partial(recorded.replayer().replay_workflow, history),
                          f"replaying run {number} of {handle.id} ({len(history.events)} events)",
                          REPLAY_TIMEOUT_SECONDS, attempts=1)
            if self.record:
                recorded.save(history, name if number == 1 else f"{name}-run{number}")
        self.kept.append(name)


@pytest.fixture
def histories(request: pytest.FixtureRequest, temporal_client: Client) -> Histories:
    return Histories(bool(request.config.getoption("--record-histories")), temporal_client)


# --- the worker as deploy/'s ServiceAccount (tests/deploykit.py) ----------------------------------------------------
@pytest.fixture(scope="session")
def service_account_kubeconfig(stack: LocalStack, crds: list[str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """deploy/ applied to the stack; a kubeconfig holding a TokenRequest token of its ServiceAccount (no admin)."""
    from tests import deploykit

    deploykit.apply(stack.kubeconfig)
    token = deploykit.request_token(stack.kubeconfig)
    path = tmp_path_factory.mktemp("service-account") / "kubeconfig"
    return deploykit.write_kubeconfig(path, deploykit.cluster_access(stack.kubeconfig), token)


@pytest.fixture
def sa_worker_process(stack: LocalStack, namespace: str, service_account_kubeconfig: Path,
                      request: pytest.FixtureRequest) -> Iterator[WorkerProcess]:
    """Like worker_process, authenticated as deploy/'s ServiceAccount; its Lease where deploy/'s Role grants it."""
    from tests import deploykit

    with running_worker(stack, namespace, request, kubeconfig=service_account_kubeconfig,
                        extra_env={"GROVE_TEMPORAL_LEASE_NAMESPACE": deploykit.NAMESPACE}) as process:
        yield process
