"""`grove-temporal validate | plan | podgroup`: output, messages and exit codes (0 ok, 1 invalid, 2 usage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from worker.cli import app

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DATA = Path(__file__).parents[1] / "grove" / "data"
runner = CliRunner(env={"COLUMNS": "200"})


def run(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    return result.exit_code, result.stdout, result.stderr


# --- validate -----------------------------------------------------------------------------------------------
def test_validate_a_valid_pcs() -> None:
    code, out, _ = run("validate", "-f", str(EXAMPLES / "prefill-scaling.yaml"))
    # Base gang of seeds 003/004: prefill replicas 0-2, one leader and two workers each.
    assert (code, out) == (0, "PodCliqueSet/my-pcs: valid; each replica's gang satisfied by 9 non-preemptible pods\n")


def test_validate_prints_field_paths_and_exits_1() -> None:
    code, out, _ = run("validate", "-f", str(DATA / "seed002" / "override-without-pcs-delay.yaml"))
    assert code == 1
    assert out == (
        "spec.template.podCliqueScalingGroups[0].terminationDelay: cannot be set while spec.template.terminationDelay "
        "is unset (gang termination is off for the PodCliqueSet)\n"
    )


def test_validate_several_documents_prefixes_each_problem() -> None:
    text = "\n---\n".join(
        [
            (EXAMPLES / "standalone.yaml").read_text(),
            (DATA / "seed001" / "invalid-minsubgroup-on-leaf.yaml").read_text(),
            "kind: PodGroup\nspec: {minMember: 2, minSubGroup: 1}\n",
        ]
    )
    code, out, _ = run("validate", "-f", "-", input=text)
    assert code == 1
    lines = out.splitlines()
    assert lines[0].startswith("PodCliqueSet/web: valid; ")
    assert (
        "PodGroup/leaf-minsubgroup: spec.subGroups[0].minSubGroup: not allowed on a leaf (SubGroup 'prefill-0' has "
        "no child SubGroups); use minMember" in lines
    )
    assert any(
        line.startswith("document 3 (line ") and ": spec: minMember and minSubGroup" in line for line in lines
    )


def test_validate_prints_the_non_preemptible_pods_of_a_valid_podgroup() -> None:
    code, out, _ = run("validate", "-f", str(DATA / "seed001" / "valid-two-level.yaml"))
    assert (code, out) == (0, "PodGroup/training-job: valid; gang satisfied by 10 non-preemptible pods\n")  # (1+4)+(1+4)
    code, out, _ = run("validate", "-f", str(EXAMPLES / "kai-podgroups.yaml"))  # seed 000's trees, seed-001 style
    assert code == 0 and "PodGroup/dynamo-inference: valid; gang satisfied by 28 non-preemptible pods" in out.splitlines()


def test_validate_kai_examples_and_warnings() -> None:
    code, out, _ = run("validate", "-f", str(EXAMPLES / "kai-podgroups.yaml"))
    assert code == 0 and out.count(": valid") == 3
    text = (EXAMPLES / "standalone.yaml").read_text().replace("minAvailable: 2", "minAvalable: 2")
    code, out, _ = run("validate", "-f", "-", input=text)
    assert code == 0
    assert "warning: spec.template.cliques[1].spec.minAvalable: unknown field (kept as is)" in out


def test_validate_missing_file_is_a_usage_error() -> None:
    code, _, err = run("validate", "-f", "/nonexistent/pcs.yaml")
    assert code == 2 and "file not found: /nonexistent/pcs.yaml" in err


def test_validate_missing_option_is_a_usage_error() -> None:
    code, _, _ = run("validate")
    assert code == 2


def test_validate_unreadable_yaml_names_the_line() -> None:
    code, _, err = run("validate", "-f", "-", input="kind: PodCliqueSet\nspec:\n  replicas: [1,\n")
    assert code == 1
    assert err.startswith("<stdin>:4:1: invalid YAML:")


def test_validate_empty_input() -> None:
    code, _, err = run("validate", "-f", "-", input="---\n")
    assert code == 1 and "no YAML documents found" in err


def test_validate_garbage_types() -> None:
    code, out, _ = run("validate", "-f", "-", input="kind: PodCliqueSet\nmetadata: {name: x}\nspec: [1]\n")
    assert code == 1 and out == "spec: must be a mapping, got a list\n"


# --- plan ---------------------------------------------------------------------------------------------------
def test_plan_json_for_the_seed_example() -> None:
    code, out, _ = run("plan", "-f", str(EXAMPLES / "prefill-scaling.yaml"), "-o", "json")
    assert code == 0
    document = json.loads(out)
    replica = document["replicas"][0]
    assert [g["name"] for g in replica["podGangs"]] == [
        "my-pcs-0",
        "my-pcs-0-prefill-0",
        "my-pcs-0-prefill-1",
    ]
    assert len(replica["podGangs"][0]["podGroups"]) == 6
    assert [pg["name"] for pg in replica["podGangs"][2]["podGroups"]] == [
        "my-pcs-0-prefill-4-leader",
        "my-pcs-0-prefill-4-worker",
    ]


def test_plan_yaml_equals_json() -> None:
    path = str(EXAMPLES / "gang-termination.yaml")
    _, as_json, _ = run("plan", "-f", path, "-o", "json")
    _, as_yaml, _ = run("plan", "-f", path, "-o", "yaml")
    assert yaml.safe_load(as_yaml) == json.loads(as_json)


def test_plan_one_replica() -> None:
    code, out, _ = run("plan", "-f", str(EXAMPLES / "standalone.yaml"), "--replica", "1", "-o", "json")
    assert code == 0
    assert [r["index"] for r in json.loads(out)["replicas"]] == [1]


def test_plan_table_lists_every_object() -> None:
    code, out, _ = run("plan", "-f", str(EXAMPLES / "prefill-scaling.yaml"))
    assert code == 0
    for name in ("my-pcs-0-prefill", "my-pcs-0-prefill-4-worker", "my-pcs-0-prefill-1", "scaled", "base"):
        assert name in out


def test_plan_replica_out_of_range_is_a_usage_error() -> None:
    code, _, err = run("plan", "-f", str(EXAMPLES / "standalone.yaml"), "--replica", "2")
    assert code == 2 and "2 is out of range: web has 2 replicas (0-1)" in err


def test_plan_bad_output_format_is_a_usage_error() -> None:
    code, _, _ = run("plan", "-f", str(EXAMPLES / "standalone.yaml"), "-o", "xml")
    assert code == 2


def test_plan_invalid_pcs_prints_problems_and_exits_1() -> None:
    code, _, err = run("plan", "-f", str(DATA / "seed002" / "zero-delay.yaml"))
    assert code == 1
    assert "spec.template.terminationDelay: must be greater than 0" in err
    assert "PodCliqueSet/zero-delay: invalid; nothing planned" in err


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: PodGroup\nspec: {minMember: 1}\n",
            "expected exactly one PodCliqueSet document, found no PodCliqueSet",
        ),
    ],
)
def test_plan_needs_exactly_one_pcs(text: str, message: str) -> None:
    code, _, err = run("plan", "-f", "-", input=text)
    assert code == 1 and message in err


def test_plan_two_pcs_documents() -> None:
    text = (
        (EXAMPLES / "standalone.yaml").read_text()
        + "\n---\n"
        + (EXAMPLES / "prefill-scaling.yaml").read_text()
    )
    code, _, err = run("plan", "-f", "-", input=text)
    assert code == 1 and "found 2 PodCliqueSets" in err


# --- podgroup -----------------------------------------------------------------------------------------------
def test_podgroup_prints_a_valid_kai_podgroup() -> None:
    code, out, _ = run("podgroup", "-f", str(EXAMPLES / "prefill-scaling.yaml"), "--replica", "0")
    assert code == 0
    document = yaml.safe_load(out)
    assert document["apiVersion"] == "scheduling.run.ai/v2alpha2" and document["kind"] == "PodGroup"
    assert all("minSubGroup" not in sub for sub in document["spec"]["subGroups"])
    code, out, _ = run("validate", "-f", "-", input=out)
    assert code == 0


def test_podgroup_elastic() -> None:
    code, out, _ = run(
        "podgroup",
        "-f",
        str(EXAMPLES / "prefill-scaling.yaml"),
        "--replica",
        "0",
        "--elastic",
        "--queue",
        "q1",
    )
    assert code == 0
    document = yaml.safe_load(out)
    subs = {sub["name"]: sub for sub in document["spec"]["subGroups"]}
    assert subs["my-pcs-0-prefill"] == {"name": "my-pcs-0-prefill", "minSubGroup": 3}
    assert document["spec"]["queue"] == "q1"


def test_podgroup_requires_replica() -> None:
    code, _, _ = run("podgroup", "-f", str(EXAMPLES / "prefill-scaling.yaml"))
    assert code == 2
