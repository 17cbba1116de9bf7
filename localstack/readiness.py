"""Free loopback ports and polling helpers for component readiness."""

from __future__ import annotations

import random
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from localstack.processes import ManagedProcess, StackStartError, log_tail

LOOPBACK = "127.0.0.1"

_handed_out: set[int] = set()
_ports_lock = threading.Lock()


# Ports are picked below the kernel's ephemeral range: a port from bind(("", 0)) comes from that range, and between
# our check and the component's own bind any outgoing connection on the machine may be given it (CI on efe65e3: the
# Temporal dev server's frontend port was "already in use" a moment after it was picked).
LOW_PORT = 10000


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The ports the kernel gives outgoing connections (Linux's default where it cannot be read)."""
    try:
        low, high = (int(part) for part in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port free on 127.0.0.1 below the ephemeral range (where the range leaves room; from the kernel otherwise),
    never handed out twice by this process."""
    low, _ = ephemeral_range()
    with _ports_lock:
        for _ in range(100):
            if low - LOW_PORT >= 1000:
                port = random.randrange(LOW_PORT, low)  # noqa: S311 - a port, not a secret
                if port in _handed_out or not _bindable(port):
                    continue
            else:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind((LOOPBACK, 0))
                    port = int(s.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise StackStartError("could not find a free loopback port")


def port_accepts(port: int, host: str = LOOPBACK) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def http_status(
    url: str, ca_file: Path | None = None, token: str | None = None, timeout: float = 2.0
) -> int | None:
    """HTTP status of a GET, or None when nothing answers. `ca_file=None` with https skips verification."""
    context: ssl.SSLContext | None = None
    if url.startswith("https://"):
        context = (
            ssl.create_default_context(cafile=str(ca_file)) if ca_file else ssl._create_unverified_context()
        )
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except (urllib.error.URLError, OSError):
        return None


def wait_until(
    check: Callable[[], bool],
    what: str,
    timeout: float,
    process: ManagedProcess | None = None,
    interval: float = 0.1,
) -> float:
    """Poll `check` until it holds; fail early when `process` dies. Returns the seconds waited."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if process is not None and not process.running():
            raise StackStartError(f"{what}: {process.exit_description()}")
        try:
            if check():
                return time.monotonic() - started
        except Exception:  # noqa: BLE001 - readiness probes fail in many ways while a server boots
            pass
        if time.monotonic() > deadline:
            detail = f"; last lines of {process.log_path}:\n{log_tail(process.log_path)}" if process else ""
            raise StackStartError(f"{what}: not ready after {timeout:.0f}s{detail}")
        time.sleep(interval)
