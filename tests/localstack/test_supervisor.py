"""The local stack's supervisor: dead processes come back after a doubling backoff; a stable one resets it."""

from __future__ import annotations

from dataclasses import dataclass

from localstack.supervisor import Supervisor


@dataclass
class FakeProcess:
    alive: bool = True
    code: int = 1

    def running(self) -> bool:
        return self.alive

    def exit_description(self) -> str:
        return f"fake exited with code {self.code}"


class Bed:
    def __init__(self, fail_restarts: int = 0) -> None:
        self.now = 0.0
        self.procs = {"kube-scheduler": FakeProcess(), "etcd": FakeProcess()}
        self.restarted: list[tuple[float, str]] = []
        self.lines: list[str] = []
        self.fail_restarts = fail_restarts
        self.supervisor = Supervisor(lambda: self.procs, self.restart, self.lines.append, clock=lambda: self.now,
                                     initial=1.0, cap=8.0, stable_after=30.0)

    def restart(self, name: str) -> None:
        self.restarted.append((self.now, name))
        if self.fail_restarts:
            self.fail_restarts -= 1
            raise RuntimeError("not ready within 30s")
        self.procs[name].alive = True

    def run_until(self, end: float, step: float = 0.5) -> None:
        while self.now < end:
            self.supervisor.tick()
            self.now += step


def test_running_processes_are_left_alone() -> None:
    bed = Bed()
    bed.run_until(100)
    assert bed.restarted == [] and bed.lines == []


def test_a_dead_process_is_restarted_after_the_initial_delay_and_announced() -> None:
    bed = Bed()
    bed.run_until(5)
    bed.procs["kube-scheduler"].alive = False
    bed.run_until(10)
    assert bed.restarted == [(6.0, "kube-scheduler")]
    assert bed.procs["kube-scheduler"].alive and bed.procs["etcd"].alive
    assert "fake exited with code 1" in bed.lines[0] and "restarting kube-scheduler in 1s" in bed.lines[0]
    assert bed.lines[-1] == "kube-scheduler restarted (restart 1)"
    assert bed.supervisor.restarts() == {"kube-scheduler": 1}


def test_a_crash_loop_backs_off_doubling_up_to_the_cap() -> None:
    bed = Bed()
    times = []
    for _ in range(6):
        bed.procs["kube-scheduler"].alive = False  # dies at once after every restart
        start = len(bed.restarted)
        while len(bed.restarted) == start:
            bed.supervisor.tick()
            bed.now += 0.5
        times.append(bed.restarted[-1][0])
    gaps = [round(b - a, 1) for a, b in zip(times, times[1:], strict=False)]
    assert gaps == [2.5, 4.5, 8.5, 8.5, 8.5]  # delay 2, 4, 8, 8, 8 (+ one tick to notice each death)


def test_a_process_that_stayed_up_starts_over_from_the_initial_delay() -> None:
    bed = Bed()
    for _ in range(3):  # build the delay up to 8
        bed.procs["etcd"].alive = False
        start = len(bed.restarted)
        while len(bed.restarted) == start:
            bed.supervisor.tick()
            bed.now += 0.5
    stable_from = bed.now
    bed.run_until(stable_from + 31)
    bed.procs["etcd"].alive = False
    died = bed.now
    bed.run_until(died + 3)
    assert bed.restarted[-1] == (died + 1.0, "etcd")


def test_a_failed_restart_is_logged_and_tried_again_later() -> None:
    bed = Bed(fail_restarts=1)
    bed.procs["kube-scheduler"].alive = False
    bed.run_until(10)
    assert [t for t, _ in bed.restarted] == [1.0, 3.5]  # the retry waits the doubled delay
    assert any("restarting kube-scheduler failed: not ready within 30s" in line for line in bed.lines)
    assert bed.procs["kube-scheduler"].alive
