"""Every manifest of the bad-input corpus gets exactly one clear message naming its field (validator and CLI), and
the validator never crashes on arbitrary input (hypothesis): valid means plannable, invalid means field.path
messages."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from grove.models import PodCliqueSet
from grove.plan import plan_replicas
from grove.validation import parse_pcs, validate_pcs
from tests.corpus.bad_manifests import CASES, BadCase, base
from worker.cli import app

PROBLEM = re.compile(r"^[A-Za-z][\w.\[\]/\-]*(\[[^\]]+\])?[\w.\[\]]*: \S.*$")


def test_the_corpus_is_large_and_distinct() -> None:
    assert len(CASES) >= 40
    manifests = [json.dumps(c.manifest(), sort_keys=True) for c in CASES]
    assert len(set(manifests)) == len(manifests)
    assert not validate_pcs(base()), "the base manifest itself is valid"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_one_message_naming_the_field(case: BadCase) -> None:
    problems = [str(p) for p in validate_pcs(case.manifest())]
    assert len(problems) == 1, problems
    assert problems[0].startswith(case.field + ": "), problems[0]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_cli_validate_prints_that_one_message(case: BadCase, tmp_path: Any) -> None:
    path = tmp_path / "pcs.yaml"
    path.write_text(yaml.safe_dump(case.manifest(), allow_unicode=True))
    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert any(line.startswith(case.field + ": ") for line in lines), result.output
    plan = CliRunner().invoke(app, ["plan", "-f", str(path), "-o", "json"])
    assert plan.exit_code == 1 and case.field in plan.output


# --- fuzzing: arbitrary values dropped anywhere into a valid manifest ------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=80),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=12,
)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*prefix, index))
    return found


PATHS = _paths(base())


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=json_values)
def test_validator_never_crashes_and_valid_means_plannable(path: tuple[Any, ...], value: Any) -> None:
    doc = copy.deepcopy(base())
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    problems = validate_pcs(doc)
    for problem in problems:
        assert PROBLEM.match(str(problem)), str(problem)
    if not problems:
        pcs, parse_problems = parse_pcs(doc)
        assert pcs is not None and not parse_problems
        assert isinstance(pcs, PodCliqueSet)
        plans = plan_replicas(pcs)  # must not raise
        assert len(plans) == pcs.spec.replicas


@settings(max_examples=200, deadline=None)
@given(value=json_values)
def test_arbitrary_documents_are_refused_with_messages(value: Any) -> None:
    problems = validate_pcs(value)
    assert problems, "a random value is never a valid PodCliqueSet"
    assert all(":" in str(p) for p in problems)
