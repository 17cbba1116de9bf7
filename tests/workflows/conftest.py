"""What the workflow tests share: a client of the session's Temporal dev server (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from localstack.temporal import TemporalDevServer


@pytest_asyncio.fixture(loop_scope="session")
async def client(dev_server: TemporalDevServer) -> AsyncIterator[Client]:
    yield await Client.connect(dev_server.address, data_converter=pydantic_data_converter)
