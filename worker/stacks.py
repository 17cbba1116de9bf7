"""Which local stack a command talks to. Each `grove-temporal run` records itself in its own file under
`<runs root>/live/` (one per run, named by its PID) and removes only that file when it stops. Commands read the
records, skip the runs whose process is gone (a PID reused by another process is told apart by its start time),
and choose: $TEMPORAL_ADDRESS if set; else the run whose kubeconfig is $KUBECONFIG (the file `run` told you to
export); else the most recently started live run, saying so when there are several.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

DEFAULT_TEMPORAL_ADDRESS = "127.0.0.1:7233"


def runs_root() -> Path:
    """Where local stacks keep their run directories and records ($GROVE_TEMPORAL_STATE_DIR overrides)."""
    base = os.environ.get("GROVE_TEMPORAL_STATE_DIR")
    return Path(base) if base else Path.home() / ".cache" / "grove-temporal" / "runs"


def records_dir() -> Path:
    return runs_root() / "live"


def process_start_time(pid: int) -> int | None:
    """Kernel start time of a PID (clock ticks since boot); tells a live owner from a recycled PID."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class RunRecord:
    pid: int
    started: int | None  # process_start_time(pid) when the record was written
    started_at: str  # RFC 3339, for people
    temporal_address: str
    temporal_ui: str
    kubeconfig: str
    worker_metrics: str
    run_dir: str

    def alive(self) -> bool:
        return self.started is not None and process_start_time(self.pid) == self.started

    @property
    def path(self) -> Path:
        return records_dir() / f"{self.pid}.json"

    def write(self) -> Path:
        records_dir().mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(self), indent=2))
        temporary.replace(self.path)
        return self.path

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def live_records() -> list[RunRecord]:
    """Records of runs still running, newest first; records of dead runs are deleted on the way."""
    found = []
    directory = records_dir()
    if not directory.is_dir():
        return []
    for path in directory.glob("*.json"):
        try:
            record = RunRecord(**json.loads(path.read_text()))
        except (OSError, ValueError, TypeError):
            continue
        if record.alive():
            found.append(record)
        else:
            path.unlink(missing_ok=True)
    return sorted(found, key=lambda r: (r.started_at, r.pid), reverse=True)


@dataclass(frozen=True)
class Choice:
    address: str
    why: str
    note: str | None = None  # something the user should know (several stacks)


def choose_temporal_address() -> Choice:
    if address := os.environ.get("TEMPORAL_ADDRESS"):
        return Choice(address, "$TEMPORAL_ADDRESS")
    records = live_records()
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        for record in records:
            if Path(record.kubeconfig).resolve() == Path(kubeconfig).expanduser().resolve():
                return Choice(record.temporal_address, f"the local stack of $KUBECONFIG (pid {record.pid})")
    if not records:
        return Choice(DEFAULT_TEMPORAL_ADDRESS, "the default")
    newest = records[0]
    note = None
    if len(records) > 1:
        note = (f"{len(records)} local stacks are running; using the newest (pid {newest.pid}, started "
                f"{newest.started_at}, Temporal {newest.temporal_address}); set KUBECONFIG to a stack's kubeconfig "
                "or TEMPORAL_ADDRESS to choose")
    return Choice(newest.temporal_address, f"the running local stack (pid {newest.pid})", note)
