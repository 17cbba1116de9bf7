"""The worker's HTTP endpoint: /metrics (Prometheus), /healthz (liveness) and /readyz (readiness).

Liveness only says the event loop answers (restarting a worker that is merely cut off from Temporal would not
help); readiness says Temporal and Kubernetes both answer, checked at most every few seconds, and that the worker's
watch cache has listed every kind once. The endpoint is up before Temporal is first reached, so a worker waiting for
Temporal at start-up is live (not restarted by its liveness probe) but not ready.

The watch cache. Until its first lists are in, every routine read of a replica waits for them (up to 2 s) and then
asks kube-apiserver instead. On a fresh control plane those lists can take a second or more: kube-apiserver answers
a custom resource's first LISTs with 429 and `Retry-After: 1` while its own cache of that resource initialises. A
worker that said ready before then made the first replicas created after it wait (0.8-0.9 s in their first workflow
task, measured on the local stack). Its state is read at every request, not cached with the checks above: it turns
ready the moment the lists are in.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

if TYPE_CHECKING:
    from worker.app import RunningWorker
    from worker.telemetry import SdkMetrics

log = logging.getLogger(__name__)
CHECK_TTL = 5.0
STUCK_KEY = "stuckWorkflows"
SCHEDULER_BACKEND = "schedulerBackend"
WATCH_CACHE_KEY = "watchCache"


class _Readiness:
    def __init__(self, running: Callable[[], RunningWorker | None]) -> None:
        self.running = running
        self.checked_at = 0.0
        self.result: dict[str, str] = {}

    async def check(self) -> dict[str, str]:
        running = self.running()
        if running is None:
            return {"temporal": "not reached yet", "worker": "not running"}
        if time.monotonic() - self.checked_at < CHECK_TTL:
            return self.result | self._cache_state(running)
        result: dict[str, str] = {}
        try:
            await asyncio.wait_for(running.client.service_client.check_health(), timeout=3)
            result["temporal"] = "ok"
        except Exception as exc:
            result["temporal"] = f"unreachable: {type(exc).__name__}"
        healthy = await asyncio.to_thread(running.kube.healthy)
        result["kubernetes"] = "ok" if healthy else "unreachable"
        result["worker"] = "ok" if running.worker.is_running else "not running"
        result["watcher"] = "leader" if running.is_leader else "standby"
        if running.doctor is not None:
            result[STUCK_KEY] = running.doctor.summary()
        result[SCHEDULER_BACKEND] = running.scheduling.describe()  # a detail, not a check
        self.result, self.checked_at = result, time.monotonic()
        return result | self._cache_state(running)

    @staticmethod
    def _cache_state(running: RunningWorker) -> dict[str, str]:
        if running.cache is None:  # --no-watch-cache: nothing to wait for
            return {}
        return {WATCH_CACHE_KEY: "synced" if running.cache.synced else "listing"}


async def serve(running: Callable[[], RunningWorker | None], sdk_metrics: SdkMetrics | None, port: int,
                stop: asyncio.Event, host: str = "0.0.0.0") -> None:
    """Serve until `stop`; `running()` is None until the worker has reached Temporal and started."""
    readiness = _Readiness(running)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request_line = (await asyncio.wait_for(reader.readline(), timeout=5)).decode(errors="replace")
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass
            path = request_line.split(" ")[1] if " " in request_line else "/"
            if path.startswith("/metrics"):
                body = generate_latest()
                if sdk_metrics is not None:
                    body += await asyncio.to_thread(sdk_metrics.scrape)
                status, ctype = 200, CONTENT_TYPE_LATEST
            elif path.startswith("/healthz"):
                status, body, ctype = 200, b"ok\n", "text/plain"
            elif path.startswith("/readyz"):
                checks = await readiness.check()
                # Stuck workflows are reported, not held against this worker: taking it out of service would not
                # heal them (and would block the rollout of a fixed build).
                healthy = all(v in ("ok", "leader", "standby", "synced") for k, v in checks.items()
                              if k not in (STUCK_KEY, SCHEDULER_BACKEND))
                status, body, ctype = (200 if healthy else 503), json.dumps(checks).encode(), "application/json"
            else:
                status, body, ctype = 404, b"not found\n", "text/plain"
            reason = {200: "OK", 404: "Not Found", 503: "Service Unavailable"}[status]
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except Exception as exc:  # a broken client must not take the endpoint down
            log.debug("http: %s", exc)
        finally:
            writer.close()

    server = await asyncio.start_server(handle, host, port)
    log.info("serving /metrics /healthz /readyz on %s:%d", host, port)
    async with server:
        await stop.wait()
