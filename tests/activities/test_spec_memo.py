"""A PodCliqueSet is parsed, validated and planned once per generation (activities/observe.py): the same uid,
generation, labels and annotations give the very same answer without the work (whatever its status and
resourceVersion), anything else is worked out again, and a manifest that never came from the apiserver is never
remembered."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from activities import observe
from grove import names
from grove.plan import InvalidPodCliqueSet, plan_replica
from grove.scale import ObservedCounts
from workflows.messages import PcsState, ReplicaRef

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BODY = yaml.safe_load((EXAMPLES / "gang-termination.yaml").read_text())


def _stored(generation: int, uid: str = "pcs-uid", **spec: Any) -> dict[str, Any]:
    obj = copy.deepcopy(BODY)
    obj["metadata"].update(uid=uid, resourceVersion=str(100 + generation), namespace="default", generation=generation)
    obj["spec"].update(spec)
    return obj


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the manifests parse_pcs was called on."""
    seen: list[str] = []
    real = observe.parse_pcs

    def counting(data: Any) -> Any:
        seen.append(data["metadata"]["name"])
        return real(data)

    monkeypatch.setattr(observe, "parse_pcs", counting)
    observe._parsed.cache_clear()
    observe._planned.cache_clear()
    return seen


def test_one_generation_is_parsed_and_planned_once(parses: list[str]) -> None:
    obj = _stored(1)
    ref = ReplicaRef(namespace="default", pcs=obj["metadata"]["name"], pcs_uid="pcs-uid", replica=0)
    first = observe.read_spec(obj, ref)
    again = copy.deepcopy(obj)  # the next read: its status written meanwhile, so a new resourceVersion
    again["metadata"]["resourceVersion"] = "555"
    again["status"] = {"replicas": 1, "availableReplicas": 1}
    again = observe.read_spec(again, ref)
    assert first.state is PcsState.PRESENT and first.plan is not None
    assert again.plan is first.plan and again.pcs is first.pcs
    assert len(parses) == 1
    assert first.plan == plan_replica(first.pcs, 0)  # remembered, and the plan planning gives

    other = observe.read_spec(obj, ref.model_copy(update={"replica": 1}))
    assert other.plan is not None and other.plan.replica == 1 and len(parses) == 1  # parsed once for both


def test_a_new_generation_label_annotation_or_counts_are_worked_out_again(parses: list[str]) -> None:
    ref = ReplicaRef(namespace="default", pcs=BODY["metadata"]["name"], pcs_uid="pcs-uid", replica=0)
    before = observe.read_spec(_stored(1), ref)
    after = observe.read_spec(_stored(2, replicas=3), ref)
    assert len(parses) == 2 and after.wanted_replicas == 3 and after.pcs is not before.pcs
    annotated = _stored(1)
    annotated["metadata"]["annotations"] = {names.ANNOTATION_SCALED_RELEASE_AFTER: names.RELEASE_AFTER_READY}
    released_later = observe.read_spec(annotated, ref)
    assert released_later.plan is not None and before.plan is not None
    assert (released_later.plan.scaled_release_after, before.plan.scaled_release_after) == ("Ready", "Scheduled")
    labelled = _stored(1)
    labelled["metadata"]["labels"] = {"team": "a"}
    assert observe.read_spec(labelled, ref).pcs is not before.pcs and len(parses) == 4

    assert before.plan is not None
    group = before.plan.scaling_groups[0].name
    counted = observe.read_spec(_stored(1), ref, counts=ObservedCounts(scaling_groups={group: 3}))
    assert counted.plan is not None and counted.plan is not before.plan
    assert counted.plan.scaling_group(group).replicas == 3 != before.plan.scaling_group(group).replicas


def test_a_manifest_without_uid_or_generation_is_never_remembered(parses: list[str]) -> None:
    obj = copy.deepcopy(BODY)
    obj["metadata"]["uid"] = "pcs-uid"  # a uid but no generation: not an object read from the apiserver
    pcs_a, _ = observe.parsed_pcs(obj)
    pcs_b, _ = observe.parsed_pcs(obj)
    assert pcs_a is not None and pcs_b is not None and pcs_a is not pcs_b and len(parses) == 2


def test_an_invalid_version_is_reported_and_never_planned(parses: list[str]) -> None:
    obj = _stored(7)
    obj["spec"]["template"]["cliques"][0]["spec"]["replicas"] = -1
    ref = ReplicaRef(namespace="default", pcs=obj["metadata"]["name"], pcs_uid="pcs-uid", replica=0)
    reading = observe.read_spec(obj, ref)
    assert reading.plan is None and reading.problems and "replicas" in " ".join(reading.problems)
    assert observe.read_spec(obj, ref).problems == reading.problems and len(parses) == 1
    pcs, problems = observe.parsed_pcs(obj)
    assert problems  # planning it still refuses, remembered or not
    with pytest.raises(InvalidPodCliqueSet):
        observe._planned(observe._Version(obj), 0, observe._counts_key(None))
