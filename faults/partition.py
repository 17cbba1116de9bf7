"""Network partitions between one worker process and kube-apiserver or Temporal: packets dropped, not refused.

Each worker process of a fault run starts inside a cgroup (v2) of its own (`wrap`: a shell writes its own PID into
the cgroup, then execs the worker, so every socket the worker ever opens belongs to it). A partition is an iptables
rule in the OUTPUT chain that drops the TCP packets sockets of that cgroup send to the target's port; lifting it
deletes the rule. Connections neither fail nor close: requests hang until a timeout, established streams go silent,
and TCP retransmits carry on once the rule is gone, as across a real partition. Needs root, iptables with its cgroup
match, and a writable cgroup2 hierarchy (`unavailable` says which is missing).

A run that dies without its cleanup (SIGKILL, or SIGTERM) leaves its rules behind; the next run sweeps them
(`sweep_stale`). A run's cgroup names the runner's PID, so a rule is stale when that process is gone; runs going on
beside it keep theirs.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from localstack.processes import pid_alive

PARENT = "grove-temporal-faults"
COMMENT = "grove-temporal-faults"


def cgroup2_root() -> Path | None:
    """Where the cgroup2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host)."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    for line in mounts:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            return Path(fields[1])
    return None


def _iptables(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["iptables", "-w", *args], capture_output=True, text=True, check=False)


class Partitions:
    """The cgroups of one fault run's workers and the drop rules currently in force."""

    def __init__(self) -> None:
        root = cgroup2_root()
        if root is None:
            raise RuntimeError("no cgroup2 hierarchy is mounted")
        self.root = root
        self.run = f"{PARENT}/{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._rules: set[tuple[str, int]] = set()

    def unavailable(self) -> str | None:
        """Why partitions cannot be made on this machine, or None (creates this run's cgroup and tries a rule)."""
        if os.geteuid() != 0:
            return "needs root (iptables, cgroups)"
        if shutil.which("iptables") is None:
            return ("iptables is not installed (`make containers` installs it with Debian's docker.io; or "
                    "`apt-get install iptables`)")
        probe = self.cgroup("probe")
        try:
            (self.root / probe).mkdir(parents=True, exist_ok=True)
        except OSError as err:
            return f"cannot create a cgroup under {self.root}: {err}"
        rule = self._rule(probe, 9)
        added = _iptables("-I", "OUTPUT", *rule)
        if added.returncode != 0:
            return f"iptables cannot match by cgroup: {added.stderr.strip()}"
        _iptables("-D", "OUTPUT", *rule)
        return None

    def sweep_stale(self) -> list[str]:
        """Delete the drop rules (and empty cgroups) of runs whose runner is gone; returns the rules deleted."""
        listed = _iptables("-S", "OUTPUT")
        swept: list[str] = []
        for line in listed.stdout.splitlines():
            spec = stale_rule(line, self._run_alive)
            if spec is None:
                continue
            if _iptables("-D", "OUTPUT", *spec).returncode == 0:
                swept.append(" ".join(spec))
        base = self.root / PARENT
        for run in sorted(base.iterdir()) if base.is_dir() else []:
            if run.is_dir() and not self._run_alive(run.name):
                for directory in [*sorted(run.glob("*")), run]:
                    with contextlib.suppress(OSError):
                        directory.rmdir()
        return swept

    def _run_alive(self, run: str) -> bool:
        """Whether the run of that cgroup name goes on: its runner's PID is alive; for a name from before PIDs were
        in names, whether any process is still in one of its cgroups."""
        pid = _runner_pid(run)
        if pid is not None:
            return pid_alive(pid)
        base = self.root / PARENT / run
        procs = [base / "cgroup.procs", *base.glob("*/cgroup.procs")]
        return any(path.exists() and path.read_text().strip() for path in procs)

    def cgroup(self, worker: str) -> str:
        return f"{self.run}/{worker}"

    def wrap(self, worker: str, argv: list[str]) -> list[str]:
        """`argv`, started inside the worker's cgroup (created here)."""
        path = self.root / self.cgroup(worker)
        path.mkdir(parents=True, exist_ok=True)
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', str(path), *argv]

    def _rule(self, cgroup: str, port: int) -> list[str]:
        return ["-p", "tcp", "--dport", str(port), "-m", "cgroup", "--path", cgroup,
                "-m", "comment", "--comment", COMMENT, "-j", "DROP"]

    def drop(self, worker: str, port: int) -> None:
        rule = self._rule(self.cgroup(worker), port)
        added = _iptables("-I", "OUTPUT", *rule)
        if added.returncode != 0:
            raise RuntimeError(f"iptables -I OUTPUT {' '.join(rule)}: {added.stderr.strip()}")
        self._rules.add((worker, port))

    def heal(self, worker: str, port: int) -> None:
        if (worker, port) in self._rules:
            _iptables("-D", "OUTPUT", *self._rule(self.cgroup(worker), port))
            self._rules.discard((worker, port))

    def cleanup(self) -> None:
        """Lift every partition of this run and remove its cgroups (once its workers have exited)."""
        for worker, port in list(self._rules):
            self.heal(worker, port)
        base = self.root / self.run
        # A directory with a process still inside (a worker not yet reaped) stays until the next boot.
        for directory in [*(sorted(base.glob("*")) if base.exists() else []), base]:
            with contextlib.suppress(OSError):
                directory.rmdir()


def stale_rule(line: str, alive: Callable[[str], bool]) -> list[str] | None:
    """For one line of `iptables -S OUTPUT`: the rule's spec (what `-D OUTPUT` takes) if it is a fault run's drop
    rule whose run (the cgroup under PARENT) is not `alive`, else None."""
    fields = shlex.split(line)
    if fields[:2] != ["-A", "OUTPUT"] or COMMENT not in fields or "--path" not in fields:
        return None
    path = fields[fields.index("--path") + 1]
    parts = path.split("/")
    if len(parts) < 2 or parts[0] != PARENT or alive(parts[1]):
        return None
    return fields[2:]


def _runner_pid(run: str) -> int | None:
    head = run.split("-", 1)[0]
    return int(head) if "-" in run and head.isdigit() else None
