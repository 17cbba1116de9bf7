"""A Docker Engine for the container tests and `grove-temporal containers` (DESIGN §9).

An engine that already answers (DOCKER_HOST, else the default socket) is used as it is and never stopped. Where
none answers and we are root, Debian's `docker.io` is installed with apt-get when `dockerd` is missing, and
`dockerd` is started on the default socket with what works on these machines: no iptables rules and no default
bridge (containers use the host's network), the storage driver dockerd picks (overlay2 where the kernel has it,
else vfs). What was started is recorded in the cache directory, so `grove-temporal containers stop` (or the test
session that started it) stops exactly that process and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from localstack.binaries import bin_dir
from localstack.processes import pid_alive

Log = Callable[[str], None]
DEFAULT_SOCKET = "/var/run/docker.sock"
START_TIMEOUT = 90.0


class EngineUnavailableError(RuntimeError):
    """No Docker Engine answers and none can be started here; the message says why, in one sentence."""


def containers_dir() -> Path:
    """Cache of the container tooling (engine state, base image tarball, wheels), outside the clone."""
    return Path(os.environ.get("GROVE_TEMPORAL_CONTAINERS_DIR") or bin_dir().parent / "containers")


def docker_cli() -> str | None:
    return shutil.which("docker")


def docker_host() -> str:
    return os.environ.get("DOCKER_HOST") or f"unix://{DEFAULT_SOCKET}"


@dataclass(frozen=True)
class Engine:
    host: str
    version: str
    storage_driver: str
    started_pid: int | None  # set when this tooling started dockerd (and so may stop it)

    @property
    def env(self) -> dict[str, str]:
        """Environment for docker clients (the CLI, docker-py, testcontainers) to reach this engine."""
        return {"DOCKER_HOST": self.host}


def _state_file() -> Path:
    return containers_dir() / "dockerd.json"


def probe(host: str | None = None, timeout: float = 10.0) -> tuple[str, str] | None:
    """(server version, storage driver) when an engine answers at `host`, else None."""
    cli = docker_cli()
    if cli is None:
        return None
    env = {**os.environ, "DOCKER_HOST": host or docker_host()}
    try:
        result = subprocess.run([cli, "info", "--format", "{{.ServerVersion}} {{.Driver}}"], env=env,
                                capture_output=True, text=True, timeout=timeout)
    except (subprocess.TimeoutExpired, OSError):
        return None
    parts = result.stdout.split()
    if result.returncode != 0 or len(parts) != 2:
        return None
    return parts[0], parts[1]


def _apt_install(packages: list[str], log: Log) -> None:
    if shutil.which("apt-get") is None:
        raise EngineUnavailableError(f"{' '.join(packages)} missing and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log(f"installing {' '.join(packages)} with apt-get …")
    started = time.monotonic()
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
        result = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-10:])
            raise EngineUnavailableError(f"`{' '.join(cmd)}` failed (exit {result.returncode}):\n{tail}")
    log(f"installed {' '.join(packages)} in {time.monotonic() - started:.0f}s")


def ensure_packages(commands: dict[str, str], log: Log, *, install: bool = True) -> None:
    """Make each command (name -> Debian package) available, installing the packages with apt-get as root."""
    missing = {pkg for cmd, pkg in commands.items() if shutil.which(cmd) is None}
    if not missing:
        return
    if not install:
        raise EngineUnavailableError(f"{', '.join(sorted(missing))} not installed (installing was not allowed)")
    if os.geteuid() != 0:
        raise EngineUnavailableError(f"{', '.join(sorted(missing))} not installed, and installing needs root")
    _apt_install(sorted(missing), log)


def _is_dockerd(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd"
    except OSError:
        return False


def ensure_engine(log: Log, *, install: bool = True) -> Engine:
    """An engine that answers: the one already running, else one started here (installed first if need be)."""
    host = docker_host()
    found = probe(host)
    if found is not None:
        state = _read_state()
        started = state.get("pid") if state.get("host") == host else None
        pid = started if isinstance(started, int) and pid_alive(started) and _is_dockerd(started) else None
        return Engine(host, found[0], found[1], pid)
    if os.environ.get("DOCKER_HOST"):
        raise EngineUnavailableError(f"no Docker Engine answers at DOCKER_HOST={host}")
    if os.geteuid() != 0:
        raise EngineUnavailableError(
            f"no Docker Engine answers at {host}, and starting one (dockerd) needs root")
    ensure_packages({"dockerd": "docker.io", "docker": "docker.io"}, log, install=install)
    return _start_dockerd(host, log)


def _read_state() -> dict[str, object]:
    try:
        data = json.loads(_state_file().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _start_dockerd(host: str, log: Log) -> Engine:
    state_dir = containers_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    log_path = state_dir / "dockerd.log"
    dockerd = shutil.which("dockerd")
    assert dockerd is not None
    argv = [dockerd, "--host", host, "--iptables=false", "--bridge=none",
            "--pidfile", str(state_dir / "dockerd.pid")]
    log(f"starting {' '.join(argv)} (log {log_path}) …")
    started = time.monotonic()
    with log_path.open("ab") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    _state_file().write_text(json.dumps({"pid": process.pid, "host": host, "started_at": time.time()}))
    while time.monotonic() - started < START_TIMEOUT:
        if process.poll() is not None:
            tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-8:])
            _state_file().unlink(missing_ok=True)
            raise EngineUnavailableError(f"dockerd exited with status {process.returncode}; log {log_path}:\n{tail}")
        found = probe(host, timeout=5)
        if found is not None:
            log(f"Docker Engine {found[0]} ({found[1]}) answers at {host} after "
                f"{time.monotonic() - started:.1f}s; pid {process.pid}")
            return Engine(host, found[0], found[1], process.pid)
        time.sleep(0.5)
    stop_started(log)
    raise EngineUnavailableError(f"dockerd did not answer at {host} within {START_TIMEOUT:.0f}s; log {log_path}")


def stop_started(log: Log, timeout: float = 30.0) -> bool:
    """Stop the dockerd this tooling started (recorded in the state file); True when one was stopped."""
    state = _read_state()
    pid = state.get("pid")
    _state_file().unlink(missing_ok=True)
    if not isinstance(pid, int) or not pid_alive(pid) or not _is_dockerd(pid):
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and pid_alive(pid):
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)
    log(f"stopped dockerd (pid {pid})")
    return True
