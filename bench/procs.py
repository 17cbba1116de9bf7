"""CPU and memory of one process from /proc (the worker's own accounting, all threads included)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

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
