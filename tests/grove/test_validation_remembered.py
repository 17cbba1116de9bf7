"""grove.validation.validate_pcs_remembered: the same verdict as validate_pcs for every manifest of the bad-input
corpus and a valid one, whatever the fields validation does not read (uid, resourceVersion, status); validated once
per distinct spec; a changed spec or annotation is validated again."""

from __future__ import annotations

import copy

import pytest

from grove import names
from grove.validation import _validated, validate_pcs, validate_pcs_remembered
from tests.corpus.bad_manifests import CASES, base

JSON = dict


def _as_stored(doc: JSON, uid: str, version: str) -> JSON:
    """As the apiserver returns it: uid, resourceVersion, generation, managed fields, a status."""
    stored = copy.deepcopy(doc)
    stored["metadata"].update(namespace="ns", uid=uid, resourceVersion=version, generation=3,
                              managedFields=[{"manager": "kubectl", "operation": "Update"}])
    stored["status"] = {"replicas": 1, "availableReplicas": 0, "observedGeneration": 3}
    return stored


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_bad_manifest_gets_the_verdict_of_validate_pcs(case: object) -> None:
    doc = case.manifest()  # type: ignore[attr-defined]
    stored = _as_stored(doc, "uid-1", "7")
    assert validate_pcs_remembered(stored) == validate_pcs(stored) != []


def test_a_valid_manifest_is_validated_once_whatever_else_changes() -> None:
    _validated.cache_clear()
    doc = base("remembered")
    assert validate_pcs_remembered(_as_stored(doc, "uid-1", "1")) == [] == validate_pcs(doc)
    for version in ("2", "3", "4"):  # status writes, another incarnation: not what validation reads
        assert validate_pcs_remembered(_as_stored(doc, f"uid-{version}", version)) == []
    assert _validated.cache_info().misses == 1 and _validated.cache_info().hits == 3


def test_a_changed_spec_or_annotation_is_validated_again() -> None:
    _validated.cache_clear()
    doc = base("changing")
    assert validate_pcs_remembered(doc) == []
    doc["spec"]["template"]["cliques"][0]["spec"]["minAvailable"] = 5  # above replicas
    assert [p.path for p in validate_pcs_remembered(doc)] == [p.path for p in validate_pcs(doc)] != []
    fixed = base("changing")
    fixed["metadata"]["annotations"] = {names.ANNOTATION_SCHEDULER_BACKEND: "volcano"}
    assert [p.path for p in validate_pcs_remembered(fixed)] == [
        f"metadata.annotations[{names.ANNOTATION_SCHEDULER_BACKEND}]"]
    assert _validated.cache_info().misses == 3
