"""The one-controller rule's verdict (grove/controllers.py)."""

from __future__ import annotations

from grove import names
from grove.controllers import other_controller_problem


def test_nothing_foreign_means_no_problem() -> None:
    assert other_controller_problem([], []) is None
    assert other_controller_problem(["kubernetes.io/pvc-protection"], []) is None


def test_groves_objects_or_finalizer_are_named() -> None:
    by_objects = other_controller_problem([], [("PodClique", "p-0-b"), ("Pod", "p-0-b-0")])
    assert by_objects is not None and by_objects.startswith("app.kubernetes.io/managed-by: managed by grove-operator")
    assert "Pod/p-0-b-0, PodClique/p-0-b are labelled app.kubernetes.io/managed-by=grove-operator" in by_objects
    by_finalizer = other_controller_problem([names.GROVE_OPERATOR_PCS_FINALIZER], [])
    assert by_finalizer is not None and names.GROVE_OPERATOR_PCS_FINALIZER in by_finalizer


def test_long_lists_are_cut() -> None:
    problem = other_controller_problem([], [("Pod", f"p-0-a-{i}") for i in range(12)])
    assert problem is not None and "and 7 more" in problem
