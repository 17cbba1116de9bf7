"""/readyz holds a worker back until its watch cache has listed every kind once, and lets it go the moment it has,
without waiting for the other checks' few seconds of caching (worker/http.py). The stand-ins below answer the other
checks; the real cache turning synced is checked end to end in tests/e2e/test_observability.py."""

from __future__ import annotations

import asyncio
import json
import socket
from types import SimpleNamespace
from typing import Any

from worker.http import serve


class _Health:
    async def check_health(self) -> bool:
        return True


def _running(cache: Any) -> Any:
    return SimpleNamespace(
        client=SimpleNamespace(service_client=_Health()),
        kube=SimpleNamespace(healthy=lambda: True),
        worker=SimpleNamespace(is_running=True),
        is_leader=True,
        doctor=None,
        scheduling=SimpleNamespace(describe=lambda: "kube"),
        cache=cache,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _readyz(port: int) -> tuple[int, dict[str, str]]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


async def _exercise(running: Any) -> list[tuple[int, dict[str, str]]]:
    port, stop = _free_port(), asyncio.Event()
    server = asyncio.create_task(serve(lambda: running, None, port, stop, host="127.0.0.1"))
    try:
        for _ in range(100):  # until it listens
            try:
                first = await _readyz(port)
                break
            except OSError:
                await asyncio.sleep(0.02)
        if running.cache is not None:
            running.cache.synced = True
        return [first, await _readyz(port)]
    finally:
        stop.set()
        await server


def test_not_ready_until_the_watch_cache_has_listed_then_ready_at_once() -> None:
    listing, synced = asyncio.run(_exercise(_running(SimpleNamespace(synced=False))))
    assert listing == (503, {"temporal": "ok", "kubernetes": "ok", "worker": "ok", "watcher": "leader",
                             "schedulerBackend": "kube", "watchCache": "listing"})
    # The second request falls within the other checks' caching (5 s): the cache's state is read anyway.
    assert synced[0] == 200 and synced[1]["watchCache"] == "synced"


def test_a_worker_without_a_watch_cache_waits_for_none() -> None:
    first, _ = asyncio.run(_exercise(_running(None)))
    assert first[0] == 200 and "watchCache" not in first[1]
