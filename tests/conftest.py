"""Shared fixtures: the real local stack (one per test session) and clients for it.

Tests are arranged by subsystem (tests/grove, tests/workflows, tests/activities, tests/worker, tests/localstack,
tests/deploy, tests/faults, tests/bench) plus tests/e2e, named by behaviour. A test that needs the real local stack
(it asks for the `stack` fixture, directly or through another fixture, or lives in tests/e2e, or starts a stack of
its own and says so with `pytestmark = pytest.mark.stack`) is marked `stack` automatically; `pytest -m "not stack"`
runs the rest without starting anything.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import pytest_asyncio

if TYPE_CHECKING:
    from kubernetes.client import ApiClient
    from temporalio.client import Client

    from localstack.stack import LocalStack
    from localstack.temporal import TemporalDevServer

TESTS_DIR = Path(__file__).resolve().parent
STACK_TEST_DIRS = (TESTS_DIR / "e2e",)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-histories", action="store_true", default=False,
        help="save the workflow histories end-to-end tests drive as fixtures under tests/fixtures/histories/",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath)).resolve()
        fixtures = getattr(item, "fixturenames", ())
        if "stack" in fixtures or any(path.is_relative_to(d) for d in STACK_TEST_DIRS):
            item.add_marker(pytest.mark.stack)


@pytest.fixture(scope="session")
def stack() -> Iterator[LocalStack]:
    """The started LocalStack: Temporal dev server, etcd, kube-apiserver, scheduler, controller-manager, KWOK.

    Torn down at the end of the session whatever happened; atexit and the SIGTERM hook are the backstop when the
    session itself is killed, and the next start reaps what a SIGKILLed session left.
    """
    from localstack.stack import StackOptions, running_stack

    with running_stack(StackOptions(nodes=3)) as local_stack:
        yield local_stack


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    """A Temporal dev server of the test module's own, without Kubernetes: for workflow tests that run the real
    workflow code, and for tests whose traffic must not share the stack's server (its store is a full run's)."""
    from localstack import rundirs
    from localstack.binaries import path_of
    from localstack.processes import ProcessRegistry
    from localstack.temporal import TemporalDevServer

    run_dir = Path(tmp_path_factory.mktemp("temporal"))
    registry = ProcessRegistry(run_dir)
    registry.claim(rundirs.owner_token())
    server = TemporalDevServer(path_of("temporal"), run_dir, registry, name="temporal-of-module", headless=True)
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def kube(stack: LocalStack) -> Iterator[ApiClient]:
    """An ApiClient for the stack's admin kubeconfig (its own Configuration; the global one stays untouched)."""
    api_client = stack.kube_client()
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture(scope="session")
def crds(kube: ApiClient) -> list[str]:
    """Every CRD under deploy/crds/, applied and Established; returns their names."""
    from localstack.crds import apply_crds

    return apply_crds(kube)


@pytest.fixture
def namespace(kube: ApiClient) -> Iterator[str]:
    """A fresh namespace, usable for pods (its default ServiceAccount exists), deleted after the test."""
    from kubernetes.client import CoreV1Api
    from kubernetes.client.exceptions import ApiException

    core = CoreV1Api(kube)
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name, "labels": {"grove-temporal.io/test": "true"}}})
    deadline = time.monotonic() + 30
    while True:
        try:
            core.read_namespaced_service_account("default", name)
            break
        except ApiException as error:
            if error.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    try:
        yield name
    finally:
        try:
            core.delete_namespace(name)
        except ApiException as error:
            if error.status != 404:
                raise


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal_client(stack: LocalStack) -> AsyncIterator[Client]:
    """A Temporal client for the stack's dev server, with the pydantic data converter (DESIGN §6)."""
    from temporalio.client import Client
    from temporalio.contrib.pydantic import pydantic_data_converter

    yield await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter)
