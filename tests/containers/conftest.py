"""Fixtures of the container tests: a Docker Engine (found, or installed and started here as DESIGN §9 says, and
stopped again if this session started it), the images built offline, testcontainers set up for this engine.

Every test here is skipped with one reason when no engine can be started (not root, no apt-get, dockerd fails).
They are marked `stack` and `containers`: `pytest -m "not stack"` stays quick and needs no engine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.engine import Engine
    from localstack.images import Built
    from tests.e2e.harness import Cluster

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.fspath)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.containers)
            item.add_marker(pytest.mark.stack)


def _log(message: str) -> None:
    print(message, flush=True)


@pytest.fixture(scope="session")
def engine() -> Iterator[Engine]:
    from localstack import engine as engines

    already = engines.probe() is not None
    try:
        found = engines.ensure_engine(_log)
    except engines.EngineUnavailableError as error:
        pytest.skip(f"no Docker Engine can be started here: {error}")
    # testcontainers (docker-py) talks to the same engine; no Ryuk (it would be pulled from a registry); docker-py's
    # default 60 s is short for creating containers on a loaded machine.
    os.environ.update(found.env)
    from testcontainers.core.config import testcontainers_config

    testcontainers_config.ryuk_disabled = True
    try:
        yield found
    finally:
        if not already and found.started_pid:
            engines.stop_started(_log)


@pytest.fixture(scope="session")
def base_image(engine: Engine) -> Built:
    from localstack import images

    return images.ensure_base(engine, _log)


@pytest.fixture(scope="session")
def worker_image(engine: Engine, base_image: Built) -> Built:
    from localstack import images

    return images.ensure_worker_image(engine, _log, base=base_image)


@pytest.fixture(scope="session")
def temporal_image(engine: Engine, base_image: Built) -> Built:
    from localstack import images

    return images.ensure_temporal_image(engine, _log, base=base_image)


@pytest.fixture
def cluster(kube: ApiClient, crds: list[str], namespace: str) -> Cluster:
    """The test namespace, with the CRDs, seen through the e2e harness."""
    from activities.kubeapi import Kube
    from tests.e2e.harness import Cluster

    return Cluster(Kube(kube), namespace)


DOCKER_CLIENT = {"timeout": 300}
