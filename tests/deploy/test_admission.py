"""Admission on the real kube-apiserver: the PodCliqueSet CRD's rules (grove/rules.py rendered as CEL, bounds and
defaults) refuse the bad-input corpus at the door with the field path, agree with `validate` on generated
manifests, fill in defaults, and do not block updates of objects stored before the rules existed."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from kubernetes.client import ApiClient

from grove.validation import validate_pcs
from tests.corpus.admission import Refused, create, replace_pcs, rules_suspended
from tests.corpus.bad_manifests import CASES, BadCase, base
from tests.corpus.generated import pcs_documents

pytestmark = pytest.mark.usefixtures("crds")


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_the_corpus_at_the_door(kube: ApiClient, namespace: str, case: BadCase) -> None:
    manifest = case.manifest(f"c-{CASES.index(case)}")
    if case.admitted:
        create(kube, namespace, manifest, dry_run=True)  # stored; the workflow path refuses it
        assert validate_pcs(manifest), case.id
        return
    with pytest.raises(Refused) as refused:
        create(kube, namespace, manifest, dry_run=True)
    assert refused.value.status == 422, refused.value
    expected = case.api_field or case.field
    named = [f for f in refused.value.fields if f and expected.startswith(_unquoted(f))]
    assert named, (case.id, expected, refused.value.fields, refused.value.message)
    print(f"{case.id}: {refused.value.message}")


def _unquoted(field: str) -> str:
    # The apiserver quotes map keys (metadata.annotations[...]) and nothing else we name.
    return field.replace('"', "")


# --- the two renderings agree ------------------------------------------------------------------------------------
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(doc=pcs_documents())
def test_the_apiserver_and_validate_agree(kube: ApiClient, namespace: str, doc: dict[str, Any]) -> None:
    problems = [str(p) for p in validate_pcs(copy.deepcopy(doc))]
    try:
        create(kube, namespace, doc, dry_run=True)
        refused = None
    except Refused as error:
        refused = error
    assert (refused is not None) == bool(problems), (problems, refused)


# --- defaults ---------------------------------------------------------------------------------------------------
def test_schema_defaults_are_filled_in(kube: ApiClient, namespace: str) -> None:
    doc = base("defaults")
    del doc["spec"]["replicas"]
    del doc["spec"]["template"]["cliques"][2]["spec"]["replicas"]
    group = doc["spec"]["template"]["podCliqueScalingGroups"][0]
    del group["replicas"], group["minAvailable"]
    stored = create(kube, namespace, doc)
    assert stored["spec"]["replicas"] == 1
    assert stored["spec"]["template"]["cliques"][2]["spec"]["replicas"] == 1
    stored_group = stored["spec"]["template"]["podCliqueScalingGroups"][0]
    assert (stored_group["replicas"], stored_group["minAvailable"]) == (1, 1)
    assert "minAvailable" not in stored["spec"]["template"]["cliques"][2]["spec"], "depends on replicas: not a schema default"


# --- ratcheting -------------------------------------------------------------------------------------------------
def test_objects_stored_before_the_rules_stay_editable(kube: ApiClient, namespace: str) -> None:
    old = base("before-rules")
    old["spec"]["template"]["cliques"][1]["spec"]["minAvailable"] = 5  # worker: 2 replicas
    old["spec"]["template"]["podCliqueScalingGroups"][0]["cliqueNames"] = ["leader", "worker", "ghost"]
    with rules_suspended(kube, namespace):
        stored = create(kube, namespace, copy.deepcopy(old))
    with pytest.raises(Refused):  # the same content is refused for a new object
        create(kube, namespace, {**copy.deepcopy(old), "metadata": {"name": "after-rules"}}, dry_run=True)

    # An unrelated change, and a change inside the clique that already broke its rule, are accepted.
    stored["spec"]["replicas"] = 2
    stored["spec"]["template"]["cliques"][1]["spec"]["minAvailable"] = 6
    stored["metadata"].setdefault("labels", {})["team"] = "a"
    stored = replace_pcs(kube, namespace, stored)
    assert stored["spec"]["replicas"] == 2

    # Breaking a rule the stored object kept is refused, with its field.
    stored["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 0
    with pytest.raises(Refused) as refused:
        replace_pcs(kube, namespace, stored)
    assert "spec.template.cliques[0].spec.replicas" in refused.value.fields, refused.value.fields

    # Fixing the object works, and then the rules hold it.
    fixed = copy.deepcopy(stored)
    fixed["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 1
    fixed["spec"]["template"]["cliques"][1]["spec"]["minAvailable"] = 2
    fixed["spec"]["template"]["podCliqueScalingGroups"][0]["cliqueNames"] = ["leader", "worker"]
    fixed = replace_pcs(kube, namespace, fixed)
    assert not validate_pcs(fixed)
    fixed["spec"]["template"]["cliques"][1]["spec"]["minAvailable"] = 5
    with pytest.raises(Refused) as refused:
        replace_pcs(kube, namespace, fixed)
    assert "spec.template.cliques[1].spec.minAvailable" in refused.value.fields, refused.value.fields
