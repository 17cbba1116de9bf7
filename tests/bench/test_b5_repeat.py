"""`bench b5 --repeat N`: the run with the median time to all progressed after the kill is reported, with every
run's figures and their range beside it (pure logic; the runs themselves are the bench smoke's)."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from bench.b5_recovery import _median_run
from worker.cli import app


def _run(all_progressed: float, floor: float, cpu: float) -> dict[str, Any]:
    return {"all_progressed_after_kill_s": all_progressed, "over_floor_s": round(all_progressed - floor, 2),
            "new_worker_cpu_s": cpu, "floor_worker_alive": {"all_progressed_s": floor, "worker_cpu_s": cpu / 2}}


def test_the_median_run_is_reported_with_every_run_and_their_range() -> None:
    runs = [_run(49.8, 31.3, 34.8), _run(45.4, 36.8, 31.6), _run(47.6, 35.8, 32.5)]
    reported = _median_run(runs)
    assert reported["all_progressed_after_kill_s"] == 47.6, "the median of three, whatever the order they ran in"
    assert [r["all_progressed_after_kill_s"] for r in reported["runs"]] == [49.8, 45.4, 47.6], "in the order run"
    assert reported["spread"]["all_progressed_after_kill_s"] == {"min": 45.4, "max": 49.8}
    assert reported["spread"]["floor_all_progressed_s"] == {"min": 31.3, "max": 36.8}
    assert reported["spread"]["over_floor_s"] == {"min": 8.6, "max": 18.5}
    assert "runs" not in _median_run([runs[0]]), "one run is reported as it is"


def test_two_runs_report_the_faster_one() -> None:
    assert _median_run([_run(50.0, 30.0, 1.0), _run(40.0, 30.0, 1.0)])["all_progressed_after_kill_s"] == 40.0


def test_repeat_is_refused_below_one_for_b5(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.runner

    async def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a scenario started")

    monkeypatch.setattr(bench.runner, "run_scenario", never)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["bench", "b5", "--repeat", "0"])
    assert result.exit_code == 2 and "--repeat" in result.stderr, result.output
