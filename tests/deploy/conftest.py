"""Fixtures of the deploy/ tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def helm() -> Path:
    """helm, built from Go modules by `grove-temporal containers tools` (which `make test` runs) and cached."""
    from localstack.binaries import BINARIES, is_cached, path_of

    if not is_cached(BINARIES["helm"]):
        pytest.skip("helm is not built: run `grove-temporal containers tools` (make test does)")
    return path_of("helm")
