"""The partition fault against the real kernel: a process started in a worker's cgroup cannot reach a port while the
partition holds (its packets are dropped: the connection attempt hangs, it is not refused), and reaches it again once
it is lifted; a process outside the cgroup is never affected. Skipped where the machine cannot make partitions."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from faults.partition import Partitions

CONNECT = ("import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2); "
           "s.close()")


@pytest.fixture
def partitions() -> Iterator[Partitions]:
    try:
        made = Partitions()
    except RuntimeError as err:
        pytest.skip(f"no partitions on this machine: {err}")
    reason = made.unavailable()
    if reason is not None:
        made.cleanup()
        pytest.skip(f"no partitions on this machine: {reason}")
    yield made
    made.cleanup()


@pytest.fixture
def port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _connects(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode == 0:
        return "connected"
    return "timed out" if "timed out" in done.stderr else f"failed: {done.stderr.strip().splitlines()[-1]}"


def test_a_partition_drops_one_workers_packets_to_one_port_until_it_is_lifted(partitions: Partitions,
                                                                               port: int) -> None:
    client = [sys.executable, "-c", CONNECT, str(port)]
    inside = partitions.wrap("worker", client)
    assert _connects(inside) == "connected"
    partitions.drop("worker", port)
    try:
        assert _connects(inside) == "timed out", "dropped, not refused"
        assert _connects(client) == "connected", "only the worker's cgroup is cut off"
        assert _connects(partitions.wrap("worker-2", client)) == "connected", "and only this worker's"
    finally:
        partitions.heal("worker", port)
    assert _connects(inside) == "connected"
