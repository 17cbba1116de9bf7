"""Child processes of the local stack: own process groups, logs in files, PIDs recorded in the run directory.

Other people run their own stacks on the same machine, so nothing here ever looks a process up by name. A process
is stopped through the PID we recorded when we started it; a PID read back from a state file is only trusted when
/proc/<pid>/cmdline still mentions our run directory (every component's command line does), so a recycled PID
belonging to somebody else is left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

STATE_FILE = "state.json"
DEFAULT_GRACE_SECONDS = 10.0


class StackStartError(RuntimeError):
    """A component could not be started or did not become ready."""


def log_tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def cmdline_of(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie has exited but is still listed; treat it as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _signal_group_or_pid(pid: int, sig: int) -> None:
    """Signal the process group led by `pid` (we start every component as a session leader), else the PID."""
    with contextlib.suppress(ProcessLookupError):
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, sig)
                return
        except ProcessLookupError:
            return
        os.kill(pid, sig)


def terminate_pids(pids: Sequence[int], grace: float | Sequence[float] = DEFAULT_GRACE_SECONDS) -> None:
    """SIGTERM every group at once; SIGKILL each one still alive when its grace period (one per PID) ends."""
    graces = [grace] * len(pids) if isinstance(grace, int | float) else list(grace)
    for pid in pids:
        _signal_group_or_pid(pid, signal.SIGTERM)
    started = time.monotonic()
    pending = dict(zip(pids, graces, strict=True))
    while pending:
        for pid, allowed in list(pending.items()):
            if not pid_alive(pid):
                del pending[pid]
            elif time.monotonic() - started >= allowed:
                _signal_group_or_pid(pid, signal.SIGKILL)
                del pending[pid]
        time.sleep(0.05)


class ProcessRegistry:
    """The run directory's state file: which PIDs this run started, and which process owns the run."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.path = run_dir / STATE_FILE
        self._lock = threading.Lock()

    def _read(self) -> dict[str, object]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _processes(self, data: dict[str, object]) -> dict[str, dict[str, object]]:
        processes = data.get("processes")
        return dict(processes) if isinstance(processes, dict) else {}

    def _write(self, data: dict[str, object]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        os.replace(tmp, self.path)

    def claim(self, owner: str) -> None:
        """Record the owning process ("pid:starttime") while keeping recorded PIDs (they may need killing)."""
        with self._lock:
            data = self._read()
            data.update({"run_dir": str(self.run_dir), "owner": owner})
            data.setdefault("processes", {})
            self._write(data)

    def owner(self) -> str | None:
        owner = self._read().get("owner")
        return owner if isinstance(owner, str) else None

    def record(self, name: str, pid: int, argv: Sequence[str]) -> None:
        with self._lock:
            data = self._read()
            processes = self._processes(data)
            processes[name] = {"pid": pid, "argv0": argv[0], "started": time.time()}
            data["processes"] = processes
            self._write(data)

    def forget(self, name: str) -> None:
        with self._lock:
            data = self._read()
            processes = self._processes(data)
            if processes.pop(name, None) is not None:
                data["processes"] = processes
                self._write(data)

    def recorded_pids(self) -> dict[str, int]:
        pids = {}
        for name, entry in self._processes(self._read()).items():
            pid = entry.get("pid") if isinstance(entry, dict) else None
            if isinstance(pid, int):
                pids[name] = pid
        return pids

    def kill_leftovers(self, grace: float = 5.0) -> list[str]:
        """Kill processes a crashed previous owner of this run directory left behind; returns what was killed."""
        ours = []
        for name, pid in self.recorded_pids().items():
            cmdline = cmdline_of(pid)
            if cmdline is not None and str(self.run_dir) in cmdline and pid_alive(pid):
                ours.append((name, pid))
        terminate_pids([pid for _, pid in ours], grace)
        for name, _ in ours:
            self.forget(name)
        return [f"{name} (pid {pid})" for name, pid in ours]


class ManagedProcess:
    """One component process: started in its own session, output appended to its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        registry: ProcessRegistry,
        env: dict[str, str] | None = None,
        max_grace: float = DEFAULT_GRACE_SECONDS,
    ) -> None:
        self.name = name
        self.max_grace = max_grace  # a stop never waits longer than this for a graceful exit
        self.argv = list(argv)
        self.log_path = log_path
        self.registry = registry
        self.env = env
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self) -> None:
        if self.running():
            raise StackStartError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            header = f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv)}\n"
            log.write(header.encode())
            log.flush()
            # start_new_session: own process group (stop() signals the whole group) and no terminal Ctrl-C, so
            # the owner decides the shutdown order.
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        self.registry.record(self.name, self.popen.pid, self.argv)

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_description(self) -> str:
        code = self.popen.poll() if self.popen else None
        status = "was never started" if self.popen is None else f"exited with code {code}"
        return f"{self.name} {status}; last lines of {self.log_path}:\n{log_tail(self.log_path)}"

    def stop(self, grace: float = DEFAULT_GRACE_SECONDS) -> None:
        if self.popen is None:
            return
        if self.popen.poll() is None:
            terminate_pids([self.popen.pid], min(grace, self.max_grace))
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=grace)
        self.registry.forget(self.name)

    def kill(self) -> None:
        """Abrupt death (SIGKILL to the group), as a crash would be."""
        if self.popen is not None and self.popen.poll() is None:
            _signal_group_or_pid(self.popen.pid, signal.SIGKILL)
            self.popen.wait()
        self.registry.forget(self.name)


def stop_all(processes: Sequence[ManagedProcess], grace: float = DEFAULT_GRACE_SECONDS) -> None:
    """Stop several processes at once: one grace period for all of them, not one each."""
    live = [(p.pid, min(grace, p.max_grace)) for p in processes if p.running() and p.pid is not None]
    terminate_pids([pid for pid, _ in live], [g for _, g in live])
    for process in processes:
        if process.popen is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.popen.wait(timeout=1)
            process.registry.forget(process.name)
