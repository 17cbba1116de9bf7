"""Static checks of deploy/ and docker-compose.yml that need no server: the Dockerfile's shape (tests/containers/
builds and runs it where an engine can be started), the Deployment's safety settings, and agreement between files
that must not drift apart (ports, grace periods, search attributes, the CRD list)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from localstack.temporal import SEARCH_ATTRIBUTES
from worker.config import WorkerSettings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"


def load(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


# --- Dockerfile ---------------------------------------------------------------------------------------------------
def dockerfile_stages(text: str) -> list[list[tuple[str, str]]]:
    """Instructions (KEYWORD, arguments) grouped by stage; continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    stages: list[list[tuple[str, str]]] = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append((keyword, args.strip()))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[list[tuple[str, str]]]:
    return dockerfile_stages((DEPLOY / "Dockerfile").read_text())


PRODUCT_PACKAGES = {"grove", "workflows", "activities", "worker"}  # DESIGN §6: the product; nothing else ships


def test_dockerfile_is_multi_stage_from_python_311_slim(stages: list[list[tuple[str, str]]]) -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim$", text, re.M)
    assert not re.search(r"^#\s*syntax\s*=", text, re.M | re.I), "a syntax line pulls a frontend from a registry"
    froms = [stage[0][1] for stage in stages]
    assert froms == ["${PYTHON_IMAGE} AS builder", "${PYTHON_IMAGE} AS runtime"]
    builder = " ".join(args for kw, args in stages[0] if kw == "RUN")
    assert "pip wheel" in builder and "pip install /wheels/" in builder, "the builder installs the built wheel"
    assert "python3 -m venv" in builder, "`python` is not a command on a Debian base"
    # Offline builds point pip at host wheels through build args (pip reads PIP_* from the environment).
    args = {a for kw, a in stages[0] if kw == "ARG"}
    assert {"PIP_NO_INDEX", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST"} <= args


def test_runtime_stage_runs_as_non_root_and_carries_no_sources(stages: list[list[tuple[str, str]]]) -> None:
    runtime = stages[-1]
    keywords = [kw for kw, _ in runtime]
    users = [args for kw, args in runtime if kw == "USER"]
    assert users, "the runtime stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and (not gid or int(gid) != 0), "numeric, non-root (runAsNonRoot)"
    entrypoint = [args for kw, args in runtime if kw == "ENTRYPOINT"]
    assert len(entrypoint) == 1 and json.loads(entrypoint[0]) == ["grove-temporal", "worker"], "exec form"
    assert keywords.index("ENTRYPOINT") > max(i for i, kw in enumerate(keywords) if kw == "USER")
    copies = [args for kw, args in runtime if kw in ("COPY", "ADD")]
    assert copies and all(c.startswith("--from=builder ") for c in copies), "only the builder's virtualenv"


def test_builder_copies_the_product_and_nothing_else(stages: list[list[tuple[str, str]]]) -> None:
    copied = {source for kw, args in stages[0] if kw == "COPY" for source in args.split()[:-1]}
    assert copied == PRODUCT_PACKAGES | {"pyproject.toml", "README.md"}  # the build reads both
    assert all((REPO / p / "__init__.py").is_file() for p in PRODUCT_PACKAGES)


def test_one_dockerignore_for_both_builders() -> None:
    """BuildKit reads `deploy/Dockerfile.dockerignore` when it exists and the classic builder never does: with the
    root file alone both send the same context. It re-includes exactly what the builder stage copies."""
    assert not (DEPLOY / "Dockerfile.dockerignore").exists()
    lines = [ln.strip() for ln in (REPO / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*", "everything is excluded first"
    included = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    assert included == PRODUCT_PACKAGES | {"pyproject.toml", "README.md"}


# --- Kubernetes manifests ----------------------------------------------------------------------------------------
def test_kustomization_lists_every_generated_crd() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    listed = {r for r in kustomization["resources"] if r.startswith("crds/")}
    assert listed == {f"crds/{p.name}" for p in (DEPLOY / "crds").glob("*.yaml")}
    assert not (DEPLOY / "crds" / "kustomization.yaml").exists(), "deploy/crds/ holds CRDs only"


def test_deployment_is_locked_down_and_outlives_the_drain() -> None:
    deployment = load("deployment.yaml")[0]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["image"] == "grove-temporal:dev"
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert pod["terminationGracePeriodSeconds"] > WorkerSettings().graceful_shutdown.total_seconds() + 10
    assert pod["serviceAccountName"] == load("serviceaccount.yaml")[0]["metadata"]["name"]


def test_probes_use_the_port_the_configmap_gives_the_worker() -> None:
    container = load("deployment.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    config = load("configmap.yaml")[0]["data"]
    (port,) = [p for p in container["ports"] if p["name"] == "http"]
    assert str(port["containerPort"]) == config["GROVE_TEMPORAL_HTTP_PORT"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert {"GROVE_TEMPORAL_TASK_QUEUE", "GROVE_TEMPORAL_WATCH_NAMESPACE", "GROVE_TEMPORAL_LOG_LEVEL"} <= set(config)


def test_temporal_connection_comes_from_an_optional_secret() -> None:
    container = load("deployment.yaml")[0]["spec"]["template"]["spec"]["containers"][0]
    from_secret = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
                   if "secretKeyRef" in e.get("valueFrom", {})}
    wanted = {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "TEMPORAL_API_KEY", "TEMPORAL_TLS", "TEMPORAL_TLS_CA",
              "TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY", "TEMPORAL_TLS_SERVER_NAME"}
    assert set(from_secret) == wanted
    assert all(ref["optional"] is True and ref["key"] == name for name, ref in from_secret.items())
    # Secrets are never in the ConfigMap.
    assert not {"TEMPORAL_API_KEY", "TEMPORAL_TLS_KEY"} & set(load("configmap.yaml")[0]["data"])


# --- docker-compose.yml -------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_compose_services_images_pinned(compose: dict) -> None:
    services = compose["services"]
    assert {"postgresql", "temporal", "temporal-ui", "worker"} <= set(services)
    for name, service in services.items():
        image = service.get("image", "")
        if "build" in service:
            continue
        assert re.search(r":\d+(\.\d+)+$", image), f"{name}: pin an exact tag, not {image!r}"
    assert services["temporal"]["environment"]["DB"] == "postgres12"


def test_compose_worker_is_built_from_the_dockerfile_with_a_read_only_kubeconfig(compose: dict) -> None:
    worker = compose["services"]["worker"]
    assert (REPO / worker["build"]["context"] / worker["build"]["dockerfile"]) == DEPLOY / "Dockerfile"
    mounts = [v for v in worker["volumes"] if v.split(":")[-2] == worker["environment"]["KUBECONFIG"]]
    assert len(mounts) == 1 and mounts[0].endswith(":ro")
    assert worker["environment"]["TEMPORAL_ADDRESS"].split(":")[0] in compose["services"]
    assert worker["read_only"] is True and worker["cap_drop"] == ["ALL"]
    grace = int(worker["stop_grace_period"].rstrip("s"))
    assert grace > WorkerSettings().graceful_shutdown.total_seconds()


def test_compose_mounts_exist_and_register_the_search_attributes_the_workflows_set(compose: dict) -> None:
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).is_file(), source
    script = (DEPLOY / "compose" / "temporal-setup.sh").read_text()
    registered = dict(re.findall(r"(Grove\w+):(\w+)", script))
    assert registered == SEARCH_ATTRIBUTES
