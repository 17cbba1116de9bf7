"""The two renderings of every rule agree: the CEL text that goes into the CRD, run by a CEL interpreter (cel-python,
RE2 regexes as in the apiserver), and the Python check that `validate` runs, on the bad-input corpus and on generated
manifests. tests/deploy/test_admission.py makes the same comparison against a real kube-apiserver."""

from __future__ import annotations

from typing import Any

import celpy  # type: ignore[import-untyped]
import pytest
from hypothesis import HealthCheck, given, settings

from grove import rules
from grove.validation import parse_pcs
from tests.corpus.bad_manifests import CASES, BadCase
from tests.corpus.generated import pcs_documents

_ENV = celpy.Environment()
CHECKS = {rule.id: _ENV.program(_ENV.compile(rule.check.cel())) for rule in rules.RULES}


def _verdicts(doc: dict[str, Any]) -> list[tuple[str, str, bool, bool, list[str]]]:
    """(rule, node path, Python says valid, CEL says valid, Python messages) per rule and node."""
    pcs, problems = parse_pcs(doc)
    if pcs is None:
        return []
    found = []
    wire = pcs.model_dump(mode="json", by_alias=True, exclude_none=True)
    for name, data, path in rules.nodes(pcs, wire, "", rules.ROOT):
        for rule in rules.rules_for(name):
            python = [p.message for p in rule.problems(data, path)]
            activation = {"self": celpy.json_to_cel(data)}
            cel = CHECKS[rule.id].evaluate(activation)
            assert not isinstance(cel, Exception), (rule.id, cel)
            found.append((rule.id, path, not python, bool(cel), python))
    return found


def test_every_rule_compiles_as_cel_with_a_static_message() -> None:
    assert len(CHECKS) == len(rules.RULES)
    for rule in (r for r in rules.RULES if r.admission):
        wire = rule.to_cel()
        assert "messageExpression" not in wire and wire["message"], rule.id  # string() would blow the cost budget
        assert "{}" not in wire["message"], rule.id


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_renderings_agree_on_the_corpus(case: BadCase) -> None:
    for rule, path, python_valid, cel_valid, python in _verdicts(case.manifest()):
        assert python_valid == cel_valid, (rule, path, python)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=pcs_documents())
def test_the_renderings_agree_on_generated_manifests(doc: dict[str, Any]) -> None:
    for rule, path, python_valid, cel_valid, python in _verdicts(doc):
        assert python_valid == cel_valid, (rule, path, python)
