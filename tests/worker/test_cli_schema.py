"""The CLI's one machine-readable schema (worker/output.py), kubectl's namespace choice, --version, completion,
and `validate` reporting every problem (--strict: unknown fields are errors)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import typer.completion
import yaml
from typer.testing import CliRunner

from tests.corpus.bad_manifests import base
from worker.cli import app
from worker.kubecontext import context_namespace
from worker.output import render, wire, with_placement
from worker.replica_client import ReplicaExecution
from workflows.messages import CliqueStatus, DeadlineStatus, Phase, ReplicaRef, ReplicaStatus, Scope
from workflows.patches import NEWEST_INPUT_BASELINE

T0 = datetime(2026, 11, 23, 17, 2, 3, 500000, tzinfo=UTC)


def _status() -> ReplicaStatus:
    return ReplicaStatus(
        ref=ReplicaRef(namespace="ns", pcs="p", pcs_uid="u", replica=0), phase=Phase.BREACHED, paused=False,
        incarnation=1,
        cliques=(CliqueStatus(name="p-0-a", present=True, pods=2, ready=1, scheduled=2, gated=0, min_available=2,
                              was_available=True, breached="True", reason="InsufficientReadyPods",
                              breach_start=T0),
                 CliqueStatus(name="p-0-b", present=True, pods=1, ready=0, scheduled=0, gated=1, min_available=1,
                              was_available=False, breached="Unknown", reason="UpdateInProgress")),
        deadlines=(DeadlineStatus(scope=Scope.PCS_REPLICA, target="p-0-a", breach_start=T0,
                                  delay=timedelta(hours=2), due_at=T0 + timedelta(hours=2), cause="x"),),
    )


def test_one_schema_camel_case_rfc3339_go_durations_real_booleans() -> None:
    data = wire(_status())
    assert data["ref"] == {"namespace": "ns", "pcs": "p", "pcsUid": "u", "replica": 0}
    assert data["phase"] == "Breached" and data["paused"] is False and data["baseGangReady"] is False
    clique, other = data["cliques"]
    assert clique["minAvailable"] == 2 and clique["wasAvailable"] is True
    assert clique["breached"] is True and other["breached"] is None  # Unknown
    assert clique["breachStart"] == "2026-11-23T17:02:03.500000Z"
    deadline = data["deadlines"][0]
    assert deadline["delay"] == "2h" and deadline["dueAt"] == "2026-11-23T19:02:03.500000Z"
    keys = json.dumps(data)
    assert "_" not in "".join(_keys(data)), keys


def test_status_output_carries_why_a_waiting_base_gang_is_not_placed() -> None:
    waiting = _status().model_copy(update={"waiting_for": ("p-0-b",)})
    reasons = {1: ["scheduler: 0/3 nodes are available: 3 Insufficient cpu."]}
    data = json.loads(render(with_placement([_status(), waiting], lambda s: reasons.get(len(s.waiting_for), [])),
                             "json"))
    assert [item["placement"] for item in data] == [[], reasons[1]]
    assert data[1]["waitingFor"] == ["p-0-b"] and data[1]["ref"]["pcsUid"] == "u"  # the schema is unchanged


def _keys(value: object) -> list[str]:
    if isinstance(value, dict):
        return [*value.keys(), *(k for v in value.values() for k in _keys(v))]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


def test_json_and_yaml_carry_the_same_data() -> None:
    listed = [ReplicaExecution("pcs/ns/p/u/0", "ns", "p", "u", 0, True, "Available", False, T0)]
    as_json = json.loads(render(listed, "json"))
    assert yaml.safe_load(render(listed, "yaml")) == as_json
    assert as_json == [{"workflowId": "pcs/ns/p/u/0", "namespace": "ns", "pcs": "p", "pcsUid": "u", "replica": 0,
                        "running": True, "phase": "Available", "paused": False,
                        "started": "2026-11-23T17:02:03.500000Z"}]
    assert "\n" not in render(listed, "json", compact=True)  # one line per --watch update


def test_namespace_from_the_kubeconfig_context(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(yaml.safe_dump({
        "current-context": "b",
        "contexts": [{"name": "a", "context": {"namespace": "team-a"}}, {"name": "b", "context": {"namespace": "team-b"}}],
    }))
    assert context_namespace([config]) == "team-b"
    config.write_text(yaml.safe_dump({"current-context": "a", "contexts": [{"name": "a", "context": {}}]}))
    assert context_namespace([config]) == "default"
    assert context_namespace([tmp_path / "missing"]) == "default"


def test_version_and_completion(monkeypatch: pytest.MonkeyPatch) -> None:
    version = CliRunner().invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.startswith("grove-temporal 0.")
    # what an operator compares before rolling the workers back (docs/operations.md)
    assert version.output.rstrip().endswith(f"replica patch baseline {NEWEST_INPUT_BASELINE}"), version.output
    # Typer finds the shell from the process tree; under a runner with no shell above it (a detached job) it finds
    # none and prints "Shell  not supported". The test is about our CLI offering completion, not about that.
    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    completion = CliRunner().invoke(app, ["--show-completion"])
    assert completion.exit_code == 0 and "complete" in completion.output


def test_operator_commands_refuse_unknown_output_formats() -> None:
    result = CliRunner().invoke(app, ["list", "-o", "xml"])
    assert result.exit_code == 2 and "'table', 'json' or 'yaml'" in result.output
    both = CliRunner().invoke(app, ["list", "-n", "x", "-A"])
    assert both.exit_code == 2 and "exclude each other" in both.output


def test_validate_reports_every_problem_not_only_the_first_bad_duration(tmp_path: Path) -> None:
    doc = base()
    doc["spec"]["template"]["terminationDelay"] = "soon"
    doc["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 0
    doc["spec"]["template"]["podCliqueScalingGroups"][0]["minAvailable"] = 5
    path = tmp_path / "pcs.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert result.exit_code == 1
    assert result.output.splitlines() == [
        "spec.template.cliques[0].spec.replicas: must be at least 1, got 0",
        "spec.template.podCliqueScalingGroups[0].minAvailable: must be between 1 and replicas (2)",
        "spec.template.terminationDelay: must be a duration such as '4h', '90s' or '1h30m', got 'soon'",
    ]


def test_validate_strict_makes_unknown_fields_errors(tmp_path: Path) -> None:
    doc = base()
    doc["spec"]["template"]["cliques"][1]["spec"]["minAvalable"] = 1
    path = tmp_path / "pcs.yaml"
    path.write_text(yaml.safe_dump(doc))
    lenient = CliRunner().invoke(app, ["validate", "-f", str(path)])
    assert lenient.exit_code == 0
    assert "warning: spec.template.cliques[1].spec.minAvalable: unknown field (kept as is)" in lenient.output
    strict = CliRunner().invoke(app, ["validate", "--strict", "-f", str(path)])
    assert strict.exit_code == 1
    assert strict.output.splitlines() == ["spec.template.cliques[1].spec.minAvalable: unknown field"]


def test_an_unreachable_temporal_is_named_without_transport_internals() -> None:
    result = CliRunner().invoke(app, ["list", "-A"], env={"TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert result.exit_code == 1
    assert "cannot reach Temporal at 127.0.0.1:1 (connection refused)" in result.output
    assert "tonic" not in result.output and "Os {" not in result.output


def test_validate_and_podgroup_speak_json_and_yaml(tmp_path: Path) -> None:
    doc = base()
    doc["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 0
    path = tmp_path / "pcs.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = CliRunner().invoke(app, ["validate", "-f", str(path), "-o", "json"])
    assert result.exit_code == 1
    assert json.loads(result.output) == [{
        "document": "PodCliqueSet/bad", "line": 1, "valid": False, "warnings": [],
        "problems": [{"field": "spec.template.cliques[0].spec.replicas", "message": "must be at least 1, got 0"}]}]
    as_yaml = CliRunner().invoke(app, ["validate", "-f", str(path), "-o", "yaml"])
    assert yaml.safe_load(as_yaml.output) == json.loads(result.output)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(base()))
    podgroup = CliRunner().invoke(app, ["podgroup", "-f", str(good), "--replica", "0", "-o", "json"])
    assert podgroup.exit_code == 0 and json.loads(podgroup.output)["kind"] == "PodGroup"
