"""deploy/ on the real kube-apiserver: `kubectl apply --dry-run=server -k deploy/` passes (Pod Security
"restricted" included), a real apply creates what the worker needs, and docker-compose.yml is checked by
`docker compose config` where a docker client with the compose plugin exists. The image is built and run by
tests/containers/ (where a Docker Engine can be started)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml
from kubernetes.client import ApiClient, AppsV1Api, CoreV1Api, RbacAuthorizationV1Api

from localstack.stack import LocalStack
from tests import deploykit

pytestmark = pytest.mark.stack  # starts real stack components of its own


def test_server_side_dry_run_of_the_kustomization_passes(stack: LocalStack, crds: list[str]) -> None:
    # A dry run creates nothing, so the namespaced objects need their Namespace to exist already (kubectl's known
    # limit); everything else (RBAC, ConfigMap, Deployment, CRDs) goes through admission as it would for real.
    deploykit.kubectl(stack.kubeconfig, "apply", "-f", str(deploykit.DEPLOY / "namespace.yaml"))
    proc = deploykit.kubectl(stack.kubeconfig, "apply", "--dry-run=server", "-k", str(deploykit.DEPLOY))
    lines = proc.stdout.splitlines()
    expected = {(d["kind"], d["metadata"]["name"]) for d in deploykit.build()}
    assert len(lines) == len(expected) and all(line.endswith("(server dry run)") for line in lines), (
        proc.stdout
    )
    # The namespace warns on Pod Security "restricted" violations; the worker's pod template has none. (The CRDs
    # the session's `crds` fixture created without kubectl get a harmless last-applied-annotation warning.)
    warnings = [w for w in proc.stderr.splitlines() if "last-applied-configuration" not in w]
    assert warnings == [], proc.stderr


def test_apply_creates_the_service_account_its_rbac_and_an_idle_deployment(
    stack: LocalStack, kube: ApiClient, crds: list[str]
) -> None:
    applied = deploykit.apply(stack.kubeconfig)
    deploykit.apply(stack.kubeconfig)  # idempotent: a second apply changes nothing and fails on nothing
    core, rbac = CoreV1Api(kube), RbacAuthorizationV1Api(kube)
    assert core.read_namespaced_service_account(deploykit.SERVICE_ACCOUNT, deploykit.NAMESPACE)
    role = rbac.read_cluster_role(deploykit.CLUSTER_ROLE)
    wanted = deploykit.find(applied, "ClusterRole")["rules"]
    assert [(r.api_groups, r.resources, r.verbs) for r in role.rules] == [
        (r["apiGroups"], r["resources"], r["verbs"]) for r in wanted
    ]
    binding = rbac.read_cluster_role_binding(deploykit.CLUSTER_ROLE)
    assert [(s.kind, s.namespace, s.name) for s in binding.subjects] == [
        ("ServiceAccount", deploykit.NAMESPACE, deploykit.SERVICE_ACCOUNT)
    ]
    assert (
        rbac.read_namespaced_role_binding(deploykit.LEASE_ROLE, deploykit.NAMESPACE).role_ref.name
        == deploykit.LEASE_ROLE
    )
    deployment = AppsV1Api(kube).read_namespaced_deployment("grove-temporal", deploykit.NAMESPACE)
    assert deployment.spec.replicas == 0
    assert (
        core.read_namespaced_config_map("grove-temporal", deploykit.NAMESPACE).data[
            "GROVE_TEMPORAL_TASK_QUEUE"
        ]
        == "grove-temporal"
    )


def test_the_builder_stage_inputs_make_a_wheel_with_the_entrypoint(tmp_path: Path) -> None:
    """What the Dockerfile's builder stage does, minus the container: build the wheel from exactly the paths it
    COPYs, and find the console script its ENTRYPOINT runs."""
    from tests.deploy.test_deploy_static import dockerfile_stages

    builder = dockerfile_stages((deploykit.DEPLOY / "Dockerfile").read_text())[0]
    src = tmp_path / "src"
    src.mkdir()
    for keyword, args in builder:
        if keyword == "COPY":
            for source in args.split()[:-1]:
                path = deploykit.REPO / source
                if path.is_dir():
                    shutil.copytree(path, src / source, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy2(path, src / source)
    out = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(src)],
        check=True,
        timeout=300,
    )
    (wheel,) = out.glob("grove_temporal-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        entry_points = next(archive.read(n).decode() for n in names if n.endswith("entry_points.txt"))
    assert "grove-temporal = worker.cli:main" in entry_points
    assert {
        "worker/cli.py",
        "worker/app.py",
        "activities/replica.py",
        "workflows/replica.py",
        "grove/plan.py",
    } <= set(names)


def test_the_compose_setup_job_registers_namespace_and_search_attributes(stack: LocalStack, tmp_path: Path) -> None:
    """deploy/compose/temporal-setup.sh against a real Temporal server (the stack's, with the cached `temporal` CLI
    in place of the admin-tools image's): a new namespace gets every search attribute the workflows set; a second
    run changes nothing and succeeds."""
    from localstack.binaries import path_of
    from localstack.temporal import SEARCH_ATTRIBUTES

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "temporal").symlink_to(path_of("temporal"))
    namespace = f"compose-{tmp_path.name[-8:]}".lower().replace("_", "-")
    env = {"PATH": f"{tmp_path / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path),
           "TEMPORAL_ADDRESS": stack.temporal_address, "TEMPORAL_NAMESPACE": namespace}
    script = str(deploykit.DEPLOY / "compose" / "temporal-setup.sh")
    for _ in range(2):
        proc = subprocess.run(["sh", script], env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    listing = subprocess.run([str(path_of("temporal")), "operator", "search-attribute", "list", "--address",
                              stack.temporal_address, "--namespace", namespace, "-o", "json"],
                             env=env, capture_output=True, text=True, timeout=60, check=True).stdout
    custom = json.loads(listing)["customAttributes"]
    types = {"INDEXED_VALUE_TYPE_KEYWORD": "Keyword", "INDEXED_VALUE_TYPE_INT": "Int", "INDEXED_VALUE_TYPE_BOOL": "Bool"}
    assert {k: types.get(v, v) for k, v in custom.items() if k.startswith("Grove")} == SEARCH_ATTRIBUTES


def _docker_compose() -> str | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=30)
    return docker if probe.returncode == 0 else None


def _compose_config(**env: str) -> dict:
    """`docker compose config`: parse, interpolate and validate against the Compose schema; needs no engine."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GROVE_TEMPORAL_")}
    proc = subprocess.run(
        [
            str(_docker_compose()),
            "compose",
            "-f",
            str(deploykit.REPO / "docker-compose.yml"),
            "config",
            "--format",
            "yaml",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=deploykit.REPO,
        env={**clean, **env},
    )
    assert proc.returncode == 0, proc.stderr
    return yaml.safe_load(proc.stdout)  # type: ignore[no-any-return]


def _kubeconfig_mount(resolved: dict) -> dict:
    worker = resolved["services"]["worker"]
    assert worker["build"]["dockerfile"] == "deploy/Dockerfile"
    return next(v for v in worker["volumes"] if v["target"] == "/etc/grove-temporal/kubeconfig")


@pytest.mark.skipif(
    _docker_compose() is None,
    reason="no docker client with the compose plugin (`docker compose version` fails)",
)
def test_docker_compose_config_validates(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    mount = _kubeconfig_mount(_compose_config(GROVE_TEMPORAL_KUBECONFIG=str(kubeconfig)))
    assert mount["source"] == str(kubeconfig) and mount["read_only"] is True
    default = _kubeconfig_mount(_compose_config())
    assert default["source"] == str(Path.home() / ".kube" / "config") and default["read_only"] is True
