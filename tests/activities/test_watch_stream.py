"""A watch stream that ends badly ends quietly. Seen by a new user: a `UnicodeDecodeError` traceback from the pod
watch when the stack stopped. A stream torn mid-read (the apiserver went away, or the watch was shut down from
another thread) may leave a partial line or a closed file behind; Kube.watch reports either as a broken stream
(KubeError), which the watcher logs as one warning line and relists after, never as a traceback."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client

from activities.kubeapi import PODS, Kube, KubeError
from worker.watcher import Watcher

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack


class _Stream:
    """An HTTP response whose body ends in `tail` (bytes, or an exception raised by the read)."""

    def __init__(self, chunks: list[bytes], tail: bytes | Exception) -> None:
        self.chunks, self.tail, self.released = chunks, tail, False

    def stream(self, amt: int, decode_content: bool = True) -> Iterator[bytes]:
        yield from self.chunks
        if isinstance(self.tail, Exception):
            raise self.tail
        yield self.tail

    def release_conn(self) -> None:
        self.released = True


class _ApiClient:
    def __init__(self, stream: _Stream) -> None:
        self.response = type("Response", (), {"status": 200, "response": stream})()

    def param_serialize(self, **kwargs: Any) -> tuple[Any, ...]:
        return kwargs["method"], kwargs["resource_path"], kwargs["header_params"], kwargs["body"], None

    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        return self.response


ADDED = b'{"type": "ADDED", "object": {"metadata": {"name": "p"}}}\n'


@pytest.mark.parametrize("tail, cause", [
    (b'{"type": "MODIFIED", "object": {"metadata": {"name": "\xff\xfe', "JSONDecodeError"),  # torn mid-character
    (b'\x00\x00{"ty\n', "JSONDecodeError"),  # a torn frame, NULs first
    (b'{"type": "MODIFIED", "obj\n', "JSONDecodeError"),
    (ValueError("I/O operation on closed file."), "ValueError"),  # shut down under the reading thread
])
def test_a_torn_watch_stream_is_a_broken_stream_not_a_crash(tail: bytes | Exception, cause: str) -> None:
    stream = _Stream([ADDED], tail if isinstance(tail, Exception) else tail + b"\n")
    events = Kube(_ApiClient(stream))  # type: ignore[arg-type]
    seen: list[Any] = []
    with pytest.raises(KubeError, match=f"watch stream broken: {cause}") as raised:
        for event in events.watch(PODS, "ns", resource_version="1"):
            seen.append(event)
    assert raised.value.status == 0 and seen == [{"type": "ADDED", "object": {"metadata": {"name": "p"}}}]
    assert stream.released


async def test_the_watcher_says_one_line_when_the_apiserver_stops_under_it_and_nothing_when_stopped(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str, temporal_client: Client,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    watcher = Watcher(Kube(kube), temporal_client, namespace=namespace)
    term = asyncio.create_task(watcher.run())
    try:
        deadline = time.monotonic() + 30
        while not watcher.cache.synced:
            assert time.monotonic() < deadline, "the watcher's feeds did not sync"
            await asyncio.sleep(0.1)
        await asyncio.to_thread(stack.stop_component, "kube-apiserver")
        await asyncio.sleep(3)  # the open streams break and the relists fail while it is down
    finally:
        await asyncio.to_thread(stack.start_component, "kube-apiserver")
    await asyncio.sleep(2)
    term.cancel()  # what the worker's shutdown (or a lost lease) does to the watcher
    await asyncio.gather(term, return_exceptions=True)
    watcher.close()  # and what the worker's shutdown does to its watch cache
    await asyncio.sleep(2)
    mine = [r for r in caplog.records if r.name in ("worker.watcher", "activities.watch_cache")]
    assert any("watch cache pods" in r.getMessage() for r in mine), "the outage was said"
    loud = [(r.levelname, r.getMessage()) for r in mine if r.exc_info or r.levelno >= logging.ERROR]
    assert loud == [], f"one warning line each, no traceback: {loud}"
