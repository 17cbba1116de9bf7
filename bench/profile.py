"""py-spy on the worker while a scenario measures: where its CPU goes, as collapsed stacks plus a top list.

`py-spy record --gil --format raw` samples only the thread holding the GIL (the worker's Python CPU, not its waits)
and writes one line per distinct stack ("frame;frame;... count"). From that: self time (the innermost frame) and
inclusive time (every frame on the stack, counted once per stack) per function.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

RATE = 50  # samples per second: enough for minutes-long phases, light on a 2-core machine


def py_spy() -> str | None:
    found = Path(sys.executable).parent / "py-spy"
    return str(found) if found.exists() else shutil.which("py-spy")


class Profiler:
    def __init__(self, pid: int, out: Path) -> None:
        self.pid = pid
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Profiler:
        binary = py_spy()
        if binary is None:
            raise RuntimeError("py-spy is not installed (pip install py-spy)")
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [binary, "record", "--pid", str(self.pid), "--format", "raw", "--rate", str(RATE), "--gil",
             "--nonblocking", "--output", str(self.out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self

    def stop(self) -> dict[str, Any]:
        """Stop recording (py-spy writes its file on SIGINT) and summarise it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(2)
            self.proc.wait(60)
        return {"file": str(self.out), **summarise(self.out)}


def _frame(raw: str) -> str:
    """'function (path/to/module.py:123)' → 'function (module.py)'."""
    name, _, where = raw.partition(" (")
    return f"{name} ({Path(where.rsplit(':', 1)[0]).name})" if where else name


def summarise(path: Path, top: int = 15) -> dict[str, Any]:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    if not path.exists():
        return {"samples": 0}
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        threads[frames[0].split(" (")[0]] += count
        calls = [_frame(f) for f in frames[1:]] or [frames[0]]
        own[calls[-1]] += count
        for name in set(calls):
            inclusive[name] += count

    def share(counter: Counter[str]) -> list[list[Any]]:
        return [[name, round(100 * n / total, 1)] for name, n in counter.most_common(top)]

    return {"samples": total, "self_pct": share(own), "inclusive_pct": share(inclusive),
            "threads_pct": share(threads)}
