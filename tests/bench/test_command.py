"""`grove-temporal bench`: bad options are refused by name before any stack starts."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from worker.cli import app


@pytest.mark.parametrize(("args", "named"), [
    (["scaleout", "--worker-counts", "1,x"], "--worker-counts"),
    (["scaleout", "--worker-counts", "0,2"], "--worker-counts"),
    (["b3", "--pods-per-replica", "5"], "--pods-per-replica"),
    (["b1", "--worker-counts", "2"], "--worker-counts"),
    (["b3", "--floors", "direct,grove"], "--floors"),
    (["b3", "--floors", "direct,direct"], "--floors"),
    (["b5", "--floors", "direct"], "--floors"),
    (["b3", "--timeout", "0"], "--timeout"),
    (["b3", "--repeat", "0"], "--repeat"),
    (["b1", "--repeat", "2"], "--repeat"),
])
def test_a_bad_option_is_refused_by_name_and_starts_nothing(args: list[str], named: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.runner

    async def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("a scenario started")

    monkeypatch.setattr(bench.runner, "run_scenario", never)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["bench", *args])
    assert result.exit_code == 2, result.output
    assert named in result.stderr


def test_a_phase_that_times_out_ends_the_run_in_one_line_and_writes_nothing(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.runner

    seen: dict[str, object] = {}

    async def late(name: str, options: dict[str, object]) -> None:
        seen.update(options)
        raise TimeoutError("timed out after 5s waiting for 17000 pods released")

    monkeypatch.setattr(bench.runner, "run_scenario", late)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["bench", "b3", "--timeout", "5", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    assert seen["timeout"] == 5.0
    assert result.stderr.strip() == ("bench: timed out after 5s waiting for 17000 pods released; nothing written, "
                                     "the stack is down (a longer --timeout lets it finish)")
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_times_out_with_figures_writes_them_marked_and_exits_1(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import bench.runner
    from bench import env, report

    message = "timed out after 5s waiting for 17000 pods released"
    measured = report.envelope("b3", {"timeout": 5.0}, {"timed_out": message,
                                                       "sizes": [{"replicas": 1000, "pods_released": 12492}]},
                               kube_version="v1.36.3", started=0.0, machine=env.machine(), notes=[])

    async def late(name: str, options: dict[str, object]) -> None:
        raise report.Unfinished(message, measured)

    monkeypatch.setattr(bench.runner, "run_scenario", late)
    result = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["bench", "b3", "--timeout", "5", "--out", str(tmp_path)])
    assert result.exit_code == 1, result.output
    (written,) = tmp_path.iterdir()
    assert json.loads(written.read_text())["results"]["sizes"] == [{"replicas": 1000, "pods_released": 12492}]
    assert result.stderr.strip() == (f"bench: {message}; wrote what was measured until then to {written}, "
                                     "the stack is down (a longer --timeout lets it finish)")
    assert "12,492" in result.stdout or "12492" in result.stdout  # the table too


def test_the_envelope_names_every_worker_setting_the_run_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from bench import env, report

    for name in [n for n in os.environ if n.startswith("GROVE_TEMPORAL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS", "4")
    monkeypatch.setenv("GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS", "0")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "elsewhere:7233")  # not a worker setting of ours: not recorded
    measured = report.envelope("b3", {}, {}, kube_version=None, started=0.0, machine=env.machine(), notes=[])
    assert measured["worker_environment"] == {"GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS": "4",
                                              "GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS": "0"}
