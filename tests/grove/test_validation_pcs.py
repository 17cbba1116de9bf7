"""PodCliqueSet validation (DESIGN §4.1) and defaults; seed 002's examples; never raising on garbage."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from grove.models import PodCliqueSet
from grove.problems import Problem
from grove.validation import check_document, defaulted, validate_document, validate_pcs

DATA = Path(__file__).parent / "data"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def pcs(**template: Any) -> dict[str, Any]:
    """A small valid PCS; keyword arguments replace parts of spec.template."""
    base: dict[str, Any] = {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": "p"},
        "spec": {
            "replicas": 2,
            "template": {
                "cliques": [
                    {"name": "router", "spec": {"replicas": 2}},
                    {"name": "leader", "spec": {"replicas": 1}},
                    {"name": "worker", "spec": {"replicas": 4, "minAvailable": 3}},
                ],
                "podCliqueScalingGroups": [
                    {"name": "sg", "cliqueNames": ["leader", "worker"], "replicas": 4, "minAvailable": 2}
                ],
            },
        },
    }
    base["spec"]["template"].update(template)
    return base


def strings(problems: list[Problem]) -> list[str]:
    return [str(p) for p in problems]


def test_the_base_fixture_is_valid() -> None:
    assert validate_pcs(pcs()) == []


# --- seed 002 -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["enabling", "disabling", "disabling-null", "pcsg-override", "min-available-levels"]
)
def test_seed002_valid_examples(name: str) -> None:
    assert validate_document(yaml.safe_load((DATA / "seed002" / f"{name}.yaml").read_text())) == []


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "override-without-pcs-delay",
            [
                "spec.template.podCliqueScalingGroups[0].terminationDelay: cannot be set while "
                "spec.template.terminationDelay is unset (gang termination is off for the PodCliqueSet)"
            ],
        ),
        (
            "zero-delay",
            ["spec.template.terminationDelay: must be greater than 0 (omit it to disable gang termination)"],
        ),
        (
            "pcsg-override-literal",
            [
                "metadata.name: required",
                "spec.template.podCliqueScalingGroups[1].cliqueNames[0]: unknown clique 'other-clique'",
            ],
        ),
    ],
)
def test_seed002_invalid_examples(name: str, expected: list[str]) -> None:
    problems = validate_document(yaml.safe_load((DATA / "seed002" / f"{name}.yaml").read_text()))
    assert strings(problems) == expected


# --- one rule at a time -------------------------------------------------------------------------------------
def mutate(change: Any) -> dict[str, Any]:
    data = pcs()
    change(data)
    return data


def template_of(data: dict[str, Any]) -> dict[str, Any]:
    return data["spec"]["template"]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(minAvailable=5),
            "spec.template.podCliqueScalingGroups[0].minAvailable: must be between 1 and replicas (4)",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(minAvailable=0),
            "spec.template.podCliqueScalingGroups[0].minAvailable: must be between 1 and replicas (4)",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(replicas=0),
            "spec.template.podCliqueScalingGroups[0].replicas: must be at least 1, got 0",
        ),
        (
            # Default minAvailable 1 exceeds nothing, but an explicit replicas below the default does.
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(replicas=1, minAvailable=None),
            None,
        ),
        (
            lambda d: template_of(d)["cliques"][2]["spec"].update(minAvailable=5),
            "spec.template.cliques[2].spec.minAvailable: must be between 1 and replicas (4)",
        ),
        (
            lambda d: template_of(d)["cliques"][2]["spec"].update(minAvailable=0),
            "spec.template.cliques[2].spec.minAvailable: must be between 1 and replicas (4)",
        ),
        (
            lambda d: template_of(d)["cliques"][0]["spec"].update(replicas=0),
            "spec.template.cliques[0].spec.replicas: must be at least 1, got 0",
        ),
        (
            lambda d: template_of(d)["cliques"][0].update(name="Router"),
            "spec.template.cliques[0].name: 'Router' is not a DNS-1123 label (lower-case letters, digits and '-', "
            "starting and ending with a letter or digit)",
        ),
        (
            lambda d: template_of(d)["cliques"].append({"name": "router", "spec": {"replicas": 1}}),
            "spec.template.cliques[3].name: duplicate clique name 'router' (also cliques[0])",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(name="s_g"),
            "spec.template.podCliqueScalingGroups[0].name: 's_g' is not a DNS-1123 label (lower-case letters, "
            "digits and '-', starting and ending with a letter or digit)",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(cliqueNames=["leader", "ghost"]),
            "spec.template.podCliqueScalingGroups[0].cliqueNames[1]: unknown clique 'ghost'",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(cliqueNames=[]),
            "spec.template.podCliqueScalingGroups[0].cliqueNames: at least one clique name is required",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"][0].update(cliqueNames=["leader", "leader"]),
            "spec.template.podCliqueScalingGroups[0].cliqueNames: clique 'leader' is listed twice",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"].append(
                {"name": "sg2", "cliqueNames": ["worker"]}
            ),
            "spec.template.podCliqueScalingGroups[1].cliqueNames[0]: clique 'worker' already belongs to "
            "scaling group 'sg'",
        ),
        (
            lambda d: template_of(d)["podCliqueScalingGroups"].append(
                {"name": "sg", "cliqueNames": ["router"]}
            ),
            "spec.template.podCliqueScalingGroups[1].name: duplicate scaling group name 'sg' "
            "(also podCliqueScalingGroups[0])",
        ),
        (
            lambda d: template_of(d).update(terminationDelay="-1h"),
            "spec.template.terminationDelay: must be greater than 0 (omit it to disable gang termination)",
        ),
        (
            lambda d: template_of(d).update(terminationDelay="four hours"),
            "spec.template.terminationDelay: must be a duration such as '4h', '90s' or '1h30m', got 'four hours'",
        ),
        (
            lambda d: (
                template_of(d).update(terminationDelay="4h"),
                template_of(d)["podCliqueScalingGroups"][0].update(terminationDelay="0s"),
            ),
            "spec.template.podCliqueScalingGroups[0].terminationDelay: must be greater than 0",
        ),
        (
            lambda d: template_of(d).update(cliques=[], podCliqueScalingGroups=[]),
            "spec.template.cliques: at least one clique is required",
        ),
        (lambda d: d["spec"].update(replicas=-1), "spec.replicas: must be 0 or more, got -1"),
        (lambda d: d["metadata"].pop("name"), "metadata.name: required"),
        (
            lambda d: d["metadata"].update(name="1p"),
            "metadata.name: must start with a letter (the headless Service is named 1p-<replica>)",
        ),
        (
            lambda d: d["metadata"].update(annotations={"grove-temporal.io/scaled-release-after": "Running"}),
            "metadata.annotations[grove-temporal.io/scaled-release-after]: must be Scheduled or Ready, got 'Running'",
        ),
    ],
)
def test_each_rule_reports_its_field(change: Any, expected: str | None) -> None:
    problems = strings(validate_pcs(mutate(change)))
    assert problems == ([] if expected is None else [expected])


def test_every_problem_is_reported_at_once() -> None:
    data = pcs(terminationDelay=None)
    template_of(data)["cliques"][0]["spec"]["minAvailable"] = 9
    template_of(data)["podCliqueScalingGroups"][0].update(minAvailable=7, terminationDelay="1h")
    assert strings(validate_pcs(data)) == [
        "spec.template.cliques[0].spec.minAvailable: must be between 1 and replicas (2)",
        "spec.template.podCliqueScalingGroups[0].minAvailable: must be between 1 and replicas (4)",
        "spec.template.podCliqueScalingGroups[0].terminationDelay: cannot be set while "
        "spec.template.terminationDelay is unset (gang termination is off for the PodCliqueSet)",
    ]


def test_scaled_release_after_accepts_its_two_values() -> None:
    for value in ("Ready", "Scheduled"):
        data = pcs()
        data["metadata"]["annotations"] = {"grove-temporal.io/scaled-release-after": value}
        assert validate_pcs(data) == []


# --- generated names ----------------------------------------------------------------------------------------
def test_generated_hostname_of_the_last_replica_must_fit_63_characters() -> None:
    # p-<replica>-router-<pod>: with 10 replicas the index has two digits.
    clique = "r" * 52
    data = pcs(cliques=[{"name": clique, "spec": {"replicas": 2}}], podCliqueScalingGroups=[])
    data["metadata"]["name"] = "pc"
    data["spec"]["replicas"] = 9  # pc-8-<52>-1 = 2+1+1+1+52+1+1 = 59
    assert validate_pcs(data) == []
    data["spec"]["replicas"] = 11  # pc-10-<52>-1 = 60 ... still fits
    assert validate_pcs(data) == []
    data["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 10000  # pod index 9999: 63 characters
    assert validate_pcs(data) == []
    data["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 10001  # pod index 10000: 64 characters
    hostname = f"pc-10-{clique}-10000"
    assert strings(validate_pcs(data)) == [
        f"spec.template.cliques[0].name: generated pod hostname {hostname!r} is 64 characters; "
        "names must be at most 63"
    ]


def test_generated_names_inside_a_scaling_group_name_the_group() -> None:
    data = pcs()
    data["metadata"]["name"] = "p" * 40
    template_of(data)["podCliqueScalingGroups"][0]["name"] = "g" * 10
    problems = strings(validate_pcs(data))
    # pppp-1-gggg-3-worker-3 = 40+2+11+2+7+2 = 64 > 63; leader: 64 too (leader and worker both 6 letters)
    assert len(problems) == 2
    assert all(
        p.startswith("spec.template.podCliqueScalingGroups[0].name: generated pod hostname of clique")
        for p in problems
    )


def test_pcs_name_too_long_for_the_service_is_blamed_on_metadata_name() -> None:
    data = pcs()
    data["metadata"]["name"] = "p" * 62
    data["spec"]["replicas"] = 10
    problems = strings(validate_pcs(data))
    assert problems[0].startswith("metadata.name: generated base PodGang and headless Service of replica 9")
    assert len(problems) == 1  # the name is the one cause; nothing else is derived from it


def test_colliding_generated_podclique_names_are_reported() -> None:
    # standalone clique "sg-1-worker" and scaling group "sg" replica 1 clique "worker" -> same PodClique name.
    data = pcs()
    template_of(data)["cliques"].append({"name": "sg-1-worker", "spec": {"replicas": 1}})
    assert strings(validate_pcs(data)) == [
        "spec.template.podCliqueScalingGroups[0].name: generated name '<pcs>-<replica>-sg-1-worker' is also "
        "generated for cliques[3]"
    ]


def test_a_scaling_group_named_like_a_standalone_clique_is_reported() -> None:
    data = pcs()
    template_of(data)["podCliqueScalingGroups"][0]["name"] = "router"
    assert strings(validate_pcs(data)) == [
        "spec.template.podCliqueScalingGroups[0].name: generated name '<pcs>-<replica>-router' is also "
        "generated for cliques[0]"
    ]


# --- defaults -----------------------------------------------------------------------------------------------
def test_defaulted_fills_groves_defaults_without_touching_the_input() -> None:
    data = pcs()
    template_of(data)["podCliqueScalingGroups"] = [{"name": "sg", "cliqueNames": ["leader", "worker"]}]
    original = PodCliqueSet.model_validate(data)
    before = original.model_dump()
    result = defaulted(original)
    assert original.model_dump() == before
    assert result.metadata.namespace == "default"
    assert [c.spec.min_available for c in result.spec.template.cliques] == [2, 1, 3]
    group = result.spec.template.pod_clique_scaling_groups[0]
    assert (group.replicas, group.min_available) == (1, 1)
    assert result.to_wire(exclude_unset=True)["spec"]["template"]["cliques"][0]["spec"]["minAvailable"] == 2


def test_pcs_replicas_defaults_to_one() -> None:
    data = pcs()
    del data["spec"]["replicas"]
    assert PodCliqueSet.model_validate(data).spec.replicas == 1


# --- malformed input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (None, ["(document): must be a mapping (a Kubernetes object), got NoneType"]),
        ([1, 2], ["(document): must be a mapping (a Kubernetes object), got list"]),
        ({"kind": "Deployment"}, None),
        (
            {},
            [
                "kind: required; expected PodCliqueSet (grove.io/v1alpha1) or PodGroup (scheduling.run.ai/v2alpha2)"
            ],
        ),
    ],
)
def test_documents_that_are_not_objects(data: Any, expected: list[str] | None) -> None:
    problems = strings(validate_document(data))
    if expected is None:
        assert problems[0].startswith("kind: unsupported kind 'Deployment'")
    else:
        assert problems == expected


def test_type_errors_use_wire_paths() -> None:
    data = pcs()
    data["spec"]["replicas"] = "3"
    template_of(data)["cliques"][2]["spec"]["minAvailable"] = [3]
    template_of(data)["podCliqueScalingGroups"][0]["cliqueNames"] = "leader"
    data["apiVersion"] = "grove.io/v1"
    assert sorted(strings(validate_pcs(data))) == sorted(
        [
            "apiVersion: must be 'grove.io/v1alpha1', got string 'grove.io/v1'",
            "spec.replicas: must be an integer, got string '3'",
            "spec.template.cliques[2].spec.minAvailable: must be an integer, got a list",
            "spec.template.podCliqueScalingGroups[0].cliqueNames: must be a list, got string 'leader'",
        ]
    )


def test_unknown_fields_are_warnings_not_problems() -> None:
    data = pcs()
    template_of(data)["cliques"][2]["spec"]["minAvalable"] = 3
    problems, warnings = check_document(data)
    assert problems == []
    assert strings(warnings) == ["spec.template.cliques[2].spec.minAvalable: unknown field (kept as is)"]


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-5, 70)
    | st.text(max_size=8)
    | st.sampled_from(["4h", "0s", "x"]),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=12,
)


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(data, dict):
        for key, value in data.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            found.extend(_paths(value, (*prefix, index)))
    return found


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_validation_never_raises_on_garbage(data: st.DataObject) -> None:
    document = pcs(terminationDelay="4h")
    paths = _paths(document)[1:]
    for _ in range(data.draw(st.integers(1, 4))):
        path = data.draw(st.sampled_from(paths))
        target: Any = document
        try:
            for key in path[:-1]:
                target = target[key]
            target[path[-1]] = data.draw(json_values)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier replacement removed this path
    problems, warnings = check_document(copy.deepcopy(document))
    assert all(isinstance(p, Problem) and p.path and p.message for p in problems + warnings)


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_validation_never_raises_on_arbitrary_documents(value: Any) -> None:
    for kind in ("PodCliqueSet", "PodGroup"):
        document = {"kind": kind, "spec": value, "metadata": value}
        assert all(isinstance(p, Problem) for p in validate_document(document))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_are_valid(path: Path) -> None:
    for document in yaml.safe_load_all(path.read_text()):
        assert check_document(document) == ([], [])
