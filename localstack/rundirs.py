"""Run directories: one per stack, holding logs, data, kubeconfigs and the state file of started PIDs.

A run whose owner process died without stopping its stack (SIGKILL, OOM, a crashed CI job) leaves processes
behind; the next start kills them (only after checking /proc that they still belong to that run directory) and
prunes old run directories, keeping the most recent few for their logs, and any marked to be kept.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from localstack.processes import STATE_FILE, ProcessRegistry, StackStartError, pid_alive
from worker.stacks import process_start_time, runs_root

KEEP_FINISHED_RUNS = 5
KEEP_MARKER = "keep"  # a run directory holding this file is never pruned (a fault run's violation: its logs)


def owner_token() -> str:
    return f"{os.getpid()}:{process_start_time(os.getpid())}"


def owner_alive(token: str | None) -> bool:
    if not token or ":" not in token:
        return False
    pid_text, start = token.split(":", 1)
    pid = int(pid_text)
    return pid_alive(pid) and str(process_start_time(pid)) == start


def new_run_dir() -> Path:
    root = runs_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    suffix = 0
    while True:
        candidate = path if suffix == 0 else path.with_name(f"{path.name}-{suffix}")
        try:
            candidate.mkdir()
            return candidate
        except FileExistsError:
            suffix += 1


def keep(run_dir: Path) -> None:
    """Never prune this run directory: its logs explain something (delete it by hand when done)."""
    (run_dir / KEEP_MARKER).touch()


def reclaim(run_dir: Path) -> list[str]:
    """Make `run_dir` ours: refuse if a live process owns it, kill what a dead owner left behind."""
    registry = ProcessRegistry(run_dir)
    token = registry.owner()
    if token and token != owner_token() and owner_alive(token):
        raise StackStartError(
            f"run directory {run_dir} is in use by the running process {token.split(':')[0]}"
        )
    return registry.kill_leftovers()


def sweep_stale_runs(log: object = None) -> list[str]:
    """Kill leftovers of crashed runs under runs_root() and prune finished run directories beyond the newest few."""
    root = runs_root()
    if not root.is_dir():
        return []
    killed: list[str] = []
    finished: list[Path] = []
    for run_dir in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True):
        if not (run_dir / STATE_FILE).is_file():
            continue
        registry = ProcessRegistry(run_dir)
        if owner_alive(registry.owner()):
            continue  # somebody's running stack (maybe another engineer's): not ours to touch
        killed += [f"{run_dir.name}: {k}" for k in registry.kill_leftovers()]
        if not (run_dir / KEEP_MARKER).exists():
            finished.append(run_dir)
    for old in finished[KEEP_FINISHED_RUNS:]:
        shutil.rmtree(old, ignore_errors=True)
    return killed
