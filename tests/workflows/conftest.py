"""Fixtures of the workflow tests that run the real workflow code on a real Temporal dev server of their own (no
Kubernetes): one server per test module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from localstack import rundirs
from localstack.binaries import path_of
from localstack.processes import ProcessRegistry
from localstack.temporal import TemporalDevServer


@pytest.fixture(scope="module")
def dev_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDevServer]:
    run_dir = Path(tmp_path_factory.mktemp("temporal"))
    registry = ProcessRegistry(run_dir)
    registry.claim(rundirs.owner_token())
    server = TemporalDevServer(path_of("temporal"), run_dir, registry, name="temporal-middle-tier", headless=True)
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
