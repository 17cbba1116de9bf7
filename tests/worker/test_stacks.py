"""Which local stack a command talks to: each run's own record, dead runs skipped (and their records removed),
$KUBECONFIG picks among several, the newest otherwise with a note; a run that stops removes only its record."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker import stacks
from worker.stacks import RunRecord, choose_temporal_address, live_records, process_start_time


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GROVE_TEMPORAL_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("TEMPORAL_ADDRESS", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    return tmp_path


@pytest.fixture
def other_process() -> Iterator[int]:
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process.pid
    finally:
        process.kill()
        process.wait()


def record(pid: int, port: int, started_at: str, tmp_path: Path) -> RunRecord:
    return RunRecord(pid=pid, started=process_start_time(pid), started_at=started_at,
                     temporal_address=f"127.0.0.1:{port}", temporal_ui="", kubeconfig=str(tmp_path / f"kc-{port}"),
                     worker_metrics="", run_dir=str(tmp_path / f"run-{port}"))


def test_no_record_means_the_default(state_dir: Path) -> None:
    assert choose_temporal_address().address == stacks.DEFAULT_TEMPORAL_ADDRESS


def test_a_dead_run_is_never_chosen_and_its_record_goes(state_dir: Path) -> None:
    finished = subprocess.Popen(["true"])
    finished.wait()
    dead = RunRecord(pid=finished.pid, started=12345, started_at="2026-11-23T10:00:00Z",
                     temporal_address="127.0.0.1:1111", temporal_ui="", kubeconfig="", worker_metrics="", run_dir="")
    dead.write()
    assert live_records() == [] and not dead.path.exists()
    assert choose_temporal_address().address == stacks.DEFAULT_TEMPORAL_ADDRESS


def test_a_recycled_pid_is_not_the_run(state_dir: Path) -> None:
    impostor = RunRecord(pid=os.getpid(), started=(process_start_time(os.getpid()) or 0) + 1,
                         started_at="2026-11-23T10:00:00Z", temporal_address="127.0.0.1:1111", temporal_ui="",
                         kubeconfig="", worker_metrics="", run_dir="")
    impostor.write()
    assert live_records() == []


def test_several_runs(state_dir: Path, other_process: int, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> None:
    older = record(other_process, 2000, "2026-11-23T10:00:00Z", state_dir)
    newer = record(os.getpid(), 3000, "2026-11-23T11:00:00Z", state_dir)
    older.write()
    newer.write()
    assert [r.pid for r in live_records()] == [os.getpid(), other_process]
    choice = choose_temporal_address()
    assert choice.address == "127.0.0.1:3000" and choice.note and "2 local stacks" in choice.note

    monkeypatch.setenv("KUBECONFIG", older.kubeconfig)  # the kubeconfig `run` told the user to export
    assert choose_temporal_address().address == "127.0.0.1:2000"
    monkeypatch.setenv("TEMPORAL_ADDRESS", "10.0.0.1:7233")
    assert choose_temporal_address().address == "10.0.0.1:7233"
    monkeypatch.delenv("TEMPORAL_ADDRESS")
    monkeypatch.delenv("KUBECONFIG")

    newer.remove()  # the newer run stops: the older one is still found
    assert choose_temporal_address().address == "127.0.0.1:2000"
    assert older.path.exists()


def test_the_operator_commands_say_which_of_several_they_chose(
        state_dir: Path, other_process: int, capsys: pytest.CaptureFixture[str]) -> None:
    from worker.replica_client import default_temporal_address

    record(other_process, 2000, "2026-11-23T10:00:00Z", state_dir).write()
    record(os.getpid(), 3000, "2026-11-23T11:00:00Z", state_dir).write()
    assert default_temporal_address() == "127.0.0.1:3000"
    assert "set KUBECONFIG" in capsys.readouterr().err
