"""`grove-temporal worker` as its own OS process, scoped to one namespace and task queue: what the end-to-end
tests, the benchmarks and the fault runner start, kill and restart."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from localstack.readiness import LOOPBACK, free_port

REPO = Path(__file__).resolve().parents[1]


def worker_env(log_dir: Path, extra: dict[str, str] | None = None, *, bytecode_cache: bool = False) -> dict[str, str]:
    """The worker's environment; with `bytecode_cache`, bytecode caching as in the image (pip compiles .pyc files at
    install), for the benchmarks.

    Temporal's workflow sandbox (GROVE_TEMPORAL_WORKFLOW_SANDBOX=1; off by default) re-imports the workflow
    module for every workflow instance it creates; without a .pyc (an editable install under
    PYTHONDONTWRITEBYTECODE=1) that is a fresh compile of workflows/replica.py each time, 12% of the worker's Python
    CPU in a profile of B3 at 200. The cache goes beside the run's logs, not into the repository; filling it costs the
    first start several seconds, which is why tests that time a worker's start-up do without it."""
    env = {**os.environ, **(extra or {}), "PYTHONUNBUFFERED": "1"}
    if bytecode_cache:
        env["PYTHONPYCACHEPREFIX"] = str(log_dir / "pycache")
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


@dataclass
class WorkerProcess:
    kubeconfig: Path
    temporal_address: str
    namespace: str
    log_dir: Path
    task_queue: str = ""
    extra_env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    log_level: str = "INFO"
    bytecode_cache: bool = False  # the benchmarks' setting (see worker_env)
    module: str = "worker.cli"  # the entry point; another runs another build (tests/e2e/broken_build.py)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    http_port: int = 0
    name: str = ""  # tells apart the logs of several workers of one namespace

    def __post_init__(self) -> None:
        self.task_queue = self.task_queue or f"tq-{self.namespace}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the worker was never started"
        return self.proc.pid

    @property
    def identity(self) -> str:
        """The leader-election identity the worker gives itself (worker.config: hostname-pid)."""
        return self.extra_env.get("GROVE_TEMPORAL_IDENTITY") or f"{socket.gethostname()}-{self.pid}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"worker-{self.namespace}{'-' + self.name if self.name else ''}-{self.starts}.log"

    def start(self) -> WorkerProcess:
        self.starts += 1
        self.http_port = free_port()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", self.module, "worker",
            "--kubeconfig", str(self.kubeconfig),
            "--temporal-address", self.temporal_address,
            "--namespace", self.namespace,
            "--task-queue", self.task_queue,
            "--http-port", str(self.http_port),
            "--log-level", self.log_level,
            *self.extra_args,
        ]
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(argv, cwd=REPO, env=worker_env(self.log_dir, self.extra_env,
                                                                          bytecode_cache=self.bytecode_cache),
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def readyz(self) -> dict[str, str] | None:
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{self.http_port}/readyz", timeout=5) as response:
                return dict(json.loads(response.read()))
        except urllib.error.HTTPError as error:
            return dict(json.loads(error.read() or b"{}"))
        except (OSError, ValueError):
            return None

    def wait_ready(self, timeout: float = 90.0, leader: bool = True) -> float:
        """Until /readyz says ok, its watch cache listed (and, by default, that this worker leads the watcher); returns
        the seconds taken."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self.proc.returncode}; log: {self.log_path}")
            checks = self.readyz() or {}
            if (checks.get("worker") == "ok" and checks.get("watchCache", "synced") == "synced"
                    and (not leader or checks.get("watcher") == "leader")):
                return time.monotonic() - began
            time.sleep(0.25)
        raise TimeoutError(f"worker not ready after {timeout:.0f}s; log: {self.log_path}")

    def kill(self) -> None:
        """SIGKILL: no drain, no lease release — what a crashed node does to a worker."""
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 40.0) -> int | None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode if self.proc else None

    def logs(self) -> str:
        return "\n".join(
            (self.log_dir / f"worker-{self.namespace}-{n}.log").read_text(errors="replace")
            for n in range(1, self.starts + 1)
            if (self.log_dir / f"worker-{self.namespace}-{n}.log").exists()
        )
