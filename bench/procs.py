"""The bench's helper processes: CPU and memory of one process from /proc (the worker's own accounting, all threads
included), and starting a `python -m bench.<module>` helper that says when it is ready."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench import interrupt
from bench.env import REPO

_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class ProcSample:
    cpu_seconds: float  # user + system, all threads, since the process started
    rss_bytes: int
    peak_rss_bytes: int  # VmHWM: the high-water mark of resident memory


def sample(pid: int) -> ProcSample:
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
    utime, stime = int(fields[11]), int(fields[12])
    status = {line.split(":", 1)[0]: line.split(":", 1)[1].strip()
              for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line}
    return ProcSample(
        cpu_seconds=(utime + stime) / _TICKS,
        rss_bytes=_kib(status.get("VmRSS", "0 kB")) * 1024,
        peak_rss_bytes=_kib(status.get("VmHWM", "0 kB")) * 1024,
    )


def _kib(text: str) -> int:
    return int(text.split()[0])


def start_module(module: str, args: list[str], log: Path, ready: bytes, what: str,
                 timeout: float = 60.0) -> subprocess.Popen[bytes]:
    """`python -m module args` with its output in `log`, once `ready` appears there; killed and RuntimeError if it
    exits first or `timeout` passes."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", module, *args], cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout
    while ready not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"{what} did not start; see {log}")
        interrupt.pause(0.1)
    return proc
