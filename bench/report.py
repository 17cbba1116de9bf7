"""A result: JSON under bench-results/ and a rich table on the terminal."""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import env
from worker.config import WorkerSettings

STAT_COLUMNS = ("n", "p50", "p95", "p99", "max")
TABLE_SKIPS = {"kube_requests_by_verb_resource", "by_verb_resource"}  # in the JSON only: too wide for a table


class Unfinished(TimeoutError):
    """A run that ran out of time, carrying the figures it measured until then. The command writes them, marked
    `timed_out`, instead of nothing: a 50-minute run that misses its deadline by a minute still says how far it got."""

    def __init__(self, message: str, results: dict[str, Any]) -> None:
        super().__init__(message)
        self.results = results


def envelope(scenario: str, options: dict[str, Any], results: dict[str, Any], *, kube_version: str | None,
             started: float, machine: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    return {
        "scenario": scenario,
        "started_at": datetime.fromtimestamp(started, UTC).isoformat(),
        "duration_s": round(time.time() - started, 1),
        "command": env.command_line(),
        "git": env.git(),
        "machine": {**machine, "loadavg_at_end": env.load_average()},
        "versions": env.versions(kube_version),
        "options": options,
        # the worker inherits it (docs/semantics.md, "Gang scheduling backends"); auto = kube on the local stack
        "scheduler_backend": os.environ.get("GROVE_TEMPORAL_SCHEDULER_BACKEND") or "auto",
        # the workers inherit it too (worker/config.py: workflow_sandbox)
        "workflow_sandbox": WorkerSettings().workflow_sandbox,
        # Every worker setting the run changed from its default: a figure taken at 4 workflow-task slots must say so.
        "worker_environment": worker_environment(),
        "results": results,
        "notes": notes,
    }


def worker_environment() -> dict[str, str]:
    """The GROVE_TEMPORAL_* variables set for this run; the benchmark's workers inherit them (worker/config.py)."""
    return {name: value for name, value in sorted(os.environ.items()) if name.startswith("GROVE_TEMPORAL_")}


def write(result: dict[str, Any], out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"{result['scenario']}-{stamp}.json"
    path.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return path


def _is_summary(value: Any) -> bool:
    return isinstance(value, dict) and "n" in value and set(value) <= {"n", "min", "p50", "p95", "p99", "max", "mean"}


def _rows(prefix: str, value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        rows: list[tuple[str, Any]] = []
        for index, item in enumerate(value):
            label = item.get("replicas", index) if "to" not in item else f"{item['from']}→{item['to']}"
            rows += _rows(f"{prefix}[{label}]", item)
        return rows
    if _is_summary(value) or not isinstance(value, dict):
        return [(prefix, value)]
    rows = []
    for key, item in value.items():
        if key not in TABLE_SKIPS:
            rows += _rows(f"{prefix}.{key}" if prefix else str(key), item)
    return rows


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, list | tuple):
        return ", ".join(_fmt(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt(v)}" for k, v in value.items())
    return str(value)


def render(result: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(width=None if sys.stdout.isatty() else 150)
    table = Table(title=f"{result['scenario']} — {result['command']}", show_lines=False)
    table.add_column("metric", overflow="fold")
    table.add_column("value", justify="right", overflow="fold")
    for column in STAT_COLUMNS:
        table.add_column(column, justify="right")
    for name, value in _rows("", result["results"]):
        if _is_summary(value):
            table.add_row(name, "", *(_fmt(value.get(c, "")) for c in STAT_COLUMNS))
        else:
            table.add_row(name, _fmt(value), *("" for _ in STAT_COLUMNS))
    console.print(table)
    machine = result["machine"]
    console.print(f"machine: {machine['cpu_count']} CPU {machine['cpu_model']}, {machine['memory_gib']} GiB; "
                  f"load {machine['loadavg_at_start']} → {machine['loadavg_at_end']}; "
                  f"git {result['git']['commit'][:12]}; workflow sandbox "
                  f"{'on' if result.get('workflow_sandbox', True) else 'off'}; {result['duration_s']} s")
    if result.get("worker_environment"):
        console.print("worker environment: " + " ".join(f"{k}={v}" for k, v in result["worker_environment"].items()))
    for note in result["notes"]:
        console.print(f"note: {note}")
