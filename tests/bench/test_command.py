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
