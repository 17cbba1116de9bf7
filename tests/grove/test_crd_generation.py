"""Generated CRDs: committed files are up to date, schemas are structural, subresources and columns are set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from grove import crds

CRD_DIR = Path(__file__).resolve().parents[2] / "deploy" / "crds"


def test_committed_crds_match_the_models() -> None:
    assert crds.stale_files(CRD_DIR) == [], "run `python -m grove.crds` and commit deploy/crds"


def test_check_mode_notices_a_hand_edit(tmp_path: Path) -> None:
    assert crds.main(["--dir", str(tmp_path)]) == 0
    assert crds.main(["--dir", str(tmp_path), "--check"]) == 0
    edited = tmp_path / "grove.io_podcliques.yaml"
    edited.write_text(edited.read_text().replace("pclq", "pq"))
    assert crds.main(["--dir", str(tmp_path), "--check"]) == 1


def _nodes(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = [(path, schema)]
    for name, child in schema.get("properties", {}).items():
        found.extend(_nodes(child, f"{path}.{name}"))
    if isinstance(schema.get("items"), dict):
        found.extend(_nodes(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        found.extend(_nodes(schema["additionalProperties"], f"{path}{{}}"))
    return found


@pytest.mark.parametrize("resource", crds.RESOURCES, ids=lambda r: r.kind)
def test_schemas_are_structural(resource: crds.Resource) -> None:
    schema = crds.crd(resource)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _nodes(schema):
        assert "type" in node, f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        assert not {"anyOf", "oneOf", "allOf", "$ref"} & node.keys(), path
        if node.get("x-kubernetes-list-type") == "map":
            assert set(node["x-kubernetes-list-map-keys"]) <= set(node["items"].get("required", [])), path


def test_pod_spec_is_an_opaque_object() -> None:
    schema = crds.crd(crds.RESOURCES[0])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    clique = schema["properties"]["spec"]["properties"]["template"]["properties"]["cliques"]["items"]
    pod_spec = clique["properties"]["spec"]["properties"]["podSpec"]
    assert pod_spec["type"] == "object" and pod_spec["x-kubernetes-preserve-unknown-fields"] is True
    assert "properties" not in pod_spec


def test_names_subresources_and_columns() -> None:
    by_kind = {
        r.kind: yaml.safe_load(text.split("\n", 1)[1])
        for r, text in zip(crds.RESOURCES, [crds.render(r) for r in crds.RESOURCES], strict=True)
    }
    assert {kind: d["spec"]["names"]["shortNames"] for kind, d in by_kind.items()} == {
        "PodCliqueSet": ["pcs"],
        "PodClique": ["pclq"],
        "PodCliqueScalingGroup": ["pcsg"],
        "PodGang": ["pg"],
    }
    assert by_kind["PodGang"]["spec"]["group"] == "scheduler.grove.io"
    for kind, document in by_kind.items():
        version = document["spec"]["versions"][0]
        assert version["subresources"]["status"] == {}
        columns = [c["name"] for c in version["additionalPrinterColumns"]]
        assert columns[-1] == "Age"
        if kind == "PodGang":
            assert "scale" not in version["subresources"]
        else:
            scale = version["subresources"]["scale"]
            assert (scale["specReplicasPath"], scale["statusReplicasPath"]) == (
                ".spec.replicas",
                ".status.replicas",
            )
    pclq_columns = [
        c["name"] for c in by_kind["PodClique"]["spec"]["versions"][0]["additionalPrinterColumns"]
    ]
    assert pclq_columns == ["Replicas", "MinAvailable", "Ready", "Scheduled", "Up-To-Date", "Gated", "Breached", "Age"]
    pcs_columns = [c["name"] for c in by_kind["PodCliqueSet"]["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert "Up-To-Date" in pcs_columns
