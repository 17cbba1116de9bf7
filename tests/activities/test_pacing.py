"""activities/pacing.py: the limit on materialisations running, led by how long they take. Pure: a clock of our own."""

from __future__ import annotations

import pytest

from activities.pacing import CreationPace, paced


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _materialise(pace: CreationPace, clock: _Clock, seconds: float, *, created: bool = True) -> None:
    with pace.materialising() as done:
        clock.now += seconds
        done(created)


def test_materialisations_inside_the_target_leave_the_limit_at_the_ceiling() -> None:
    clock = _Clock()
    pace = CreationPace(12, 4.0, clock=clock)
    for _ in range(50):
        _materialise(pace, clock, 0.3)
    assert pace.limit == 12 and pace.running == 0


def test_slow_materialisations_bring_the_limit_toward_what_would_make_them_take_the_target() -> None:
    """A burst: each takes 10 s with 12 running. The limit heads for 12 x 4 / 10 (4.8) and below, as long as they
    stay slow, down to the floor; faster ones raise it again, up to the ceiling."""
    clock = _Clock()
    pace = CreationPace(12, 4.0, clock=clock)
    _materialise(pace, clock, 10.0)
    assert pace.limit == 10  # a fifth of the way from 12 toward 4.8: 10.56
    for _ in range(40):
        _materialise(pace, clock, 10.0)
    assert pace.limit == 2, "ten seconds at every limit: down to the floor"
    for _ in range(40):
        _materialise(pace, clock, 1.0)
    assert pace.limit == 12


def test_a_materialisation_that_created_nothing_or_failed_says_nothing_of_the_pace() -> None:
    clock = _Clock()
    pace = CreationPace(12, 4.0, clock=clock)
    _materialise(pace, clock, 30.0, created=False)
    with pytest.raises(RuntimeError), pace.materialising():
        clock.now += 30.0
        raise RuntimeError("kube-apiserver refused")
    assert pace.limit == 12 and pace.running == 0


def test_the_pace_is_full_while_as_many_run_as_the_limit_allows() -> None:
    clock = _Clock()
    pace = CreationPace(2, 4.0, floor=1, clock=clock)
    with pace.materialising():
        assert not pace.full()
        with pace.materialising():
            assert pace.full() and pace.running == 2
        assert not pace.full()
    with paced(None) as done:  # a worker without a pace counts nothing
        done(True)
    assert pace.running == 0


@pytest.mark.parametrize("ceiling, target, floor", [(0, 4.0, 1), (4, 4.0, 5), (4, 0.0, 1)])
def test_a_pace_that_could_never_let_anything_run_is_refused(ceiling: int, target: float, floor: int) -> None:
    with pytest.raises(ValueError, match="creation pace"):
        CreationPace(ceiling, target, floor=floor)
