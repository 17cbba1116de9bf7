"""The Helm chart (deploy/helm/grove-temporal) checked by helm itself: `helm lint --strict`, `helm template` with the
values an operator sets (Temporal address, TLS, API key, scheduler backend, namespace scope), and bad values
refused with the field named. Its RBAC is deploy/'s (one source: the chart reads deploy/clusterrole.yaml and
deploy/role.yaml through symlinks) and its CRDs are deploy/crds/. helm is built from Go modules
(`grove-temporal containers tools`, which `make test` runs)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "grove-temporal"
DEPLOY = REPO / "deploy"
RELEASE = "gt"
NAMESPACE = "gt-system"

Doc = dict[str, Any]


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120)


def template(helm: Path, *sets: str, crds: bool = False) -> list[Doc]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += [f"--set={s}" for s in sets]
    if crds:
        args.append("--include-crds")
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def one(docs: list[Doc], kind: str) -> Doc:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} rendered"
    return found[0]


def deploy_doc(name: str, kind: str) -> Doc:
    return next(d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d and d["kind"] == kind)


def test_helm_lint_strict(helm: Path) -> None:
    for sets in ([], ["watchNamespace=team-a", "temporal.apiKey.existingSecret=temporal-key",
                      "temporal.tls.secretName=temporal-tls", "temporal.tls.certKey=tls.crt",
                      "temporal.tls.keyKey=tls.key", "schedulerBackend=kai"]):
        proc = run_helm(helm, "lint", "--strict", str(CHART), *[f"--set={s}" for s in sets])
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "0 chart(s) failed" in proc.stdout


def test_defaults_render_deploys_objects_with_deploys_rules_and_crds(helm: Path) -> None:
    docs = template(helm, crds=True)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == sorted(["CustomResourceDefinition"] * 4 + [
        "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Deployment"])
    crds = {d["metadata"]["name"]: d for d in docs if d["kind"] == "CustomResourceDefinition"}
    for path in (DEPLOY / "crds").glob("*.yaml"):
        expected = yaml.safe_load(path.read_text())
        assert crds[expected["metadata"]["name"]] == expected, path.name
    assert one(docs, "ClusterRole")["rules"] == deploy_doc("clusterrole.yaml", "ClusterRole")["rules"]
    assert one(docs, "Role")["rules"] == deploy_doc("role.yaml", "Role")["rules"]
    assert one(docs, "Role")["metadata"]["namespace"] == NAMESPACE
    account = one(docs, "ServiceAccount")["metadata"]
    for binding in ("ClusterRoleBinding", "RoleBinding"):
        assert one(docs, binding)["subjects"] == [
            {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}]

    # The pod runs exactly as deploy/deployment.yaml's does.
    ours = one(docs, "Deployment")["spec"]["template"]["spec"]
    theirs = deploy_doc("deployment.yaml", "Deployment")["spec"]["template"]["spec"]
    assert ours["securityContext"] == theirs["securityContext"]
    assert ours["terminationGracePeriodSeconds"] == theirs["terminationGracePeriodSeconds"]
    assert ours["serviceAccountName"] == account["name"]
    (container,) = ours["containers"]
    (reference,) = theirs["containers"]
    for key in ("securityContext", "startupProbe", "livenessProbe", "readinessProbe", "ports", "args", "resources"):
        assert container[key] == reference[key], key
    assert container["image"] == "grove-temporal:0.1.0"
    config = one(docs, "ConfigMap")["data"]
    assert config["TEMPORAL_ADDRESS"] == "temporal-frontend.temporal.svc:7233"
    assert config["GROVE_TEMPORAL_WATCH_NAMESPACE"] == "" and config["GROVE_TEMPORAL_SCHEDULER_BACKEND"] == "auto"
    plain = deploy_doc("configmap.yaml", "ConfigMap")["data"]
    for key in ("GROVE_TEMPORAL_MAX_CACHED_WORKFLOWS", "GROVE_TEMPORAL_WORKFLOW_SANDBOX", "GROVE_TEMPORAL_NUDGE_COALESCE_MS",
                "GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS", "GROVE_TEMPORAL_STICKY_FIRST_SLOTS",
                "GROVE_TEMPORAL_CREATION_PACING", "GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S"):
        assert config[key] == plain[key], key
    assert config["GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS"] == "12"
    assert "TEMPORAL_TLS" not in config, "unset: the worker decides from the API key and TLS files"


def test_namespace_scope_grants_the_rules_in_that_namespace_only(helm: Path) -> None:
    docs = template(helm, "watchNamespace=team-a")
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for d in docs if d["kind"] == "Role"}
    worker_role = roles[("team-a", f"{RELEASE}-grove-temporal-worker")]
    assert worker_role["rules"] == deploy_doc("clusterrole.yaml", "ClusterRole")["rules"]
    binding = next(d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "team-a")
    assert binding["roleRef"]["name"] == worker_role["metadata"]["name"]
    assert binding["subjects"][0]["namespace"] == NAMESPACE
    assert one(docs, "ConfigMap")["data"]["GROVE_TEMPORAL_WATCH_NAMESPACE"] == "team-a"


def test_temporal_address_tls_api_key_and_scheduler_backend(helm: Path) -> None:
    docs = template(helm, "temporal.address=my-ns.a1b2c.tmprl.cloud:7233", "temporal.namespace=my-ns.a1b2c",
                    "temporal.apiKey.existingSecret=temporal-key", "temporal.tls.enabled=true",
                    "temporal.tls.serverName=my-ns.tmprl.cloud", "temporal.tls.secretName=temporal-tls",
                    "temporal.tls.certKey=tls.crt", "temporal.tls.keyKey=tls.key", "schedulerBackend=kube")
    config = one(docs, "ConfigMap")["data"]
    assert config["TEMPORAL_ADDRESS"] == "my-ns.a1b2c.tmprl.cloud:7233"
    assert config["TEMPORAL_NAMESPACE"] == "my-ns.a1b2c"
    assert config["TEMPORAL_TLS"] == "true" and config["TEMPORAL_TLS_SERVER_NAME"] == "my-ns.tmprl.cloud"
    assert config["TEMPORAL_TLS_CA"] == "/etc/grove-temporal/tls/ca.crt"
    assert config["TEMPORAL_TLS_CERT"] == "/etc/grove-temporal/tls/tls.crt"
    assert config["TEMPORAL_TLS_KEY"] == "/etc/grove-temporal/tls/tls.key"
    assert config["GROVE_TEMPORAL_SCHEDULER_BACKEND"] == "kube"
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["TEMPORAL_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "temporal-key", "key": "TEMPORAL_API_KEY"}
    assert {"name": "temporal-tls", "secret": {"secretName": "temporal-tls", "defaultMode": 0o440}} in pod["volumes"]
    assert not [d for d in docs if d["kind"] == "Secret"], "an existing Secret is referenced, not made"
    # The API key is never in the ConfigMap.
    assert "TEMPORAL_API_KEY" not in config

    inline = template(helm, "temporal.apiKey.value=s3cr3t")
    secret = one(inline, "Secret")
    assert secret["stringData"] == {"TEMPORAL_API_KEY": "s3cr3t"}
    env = {e["name"]: e for e in one(inline, "Deployment")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TEMPORAL_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == secret["metadata"]["name"]
    assert "s3cr3t" not in yaml.safe_dump(one(inline, "ConfigMap"))


def test_every_setting_the_chart_writes_is_one_the_worker_reads(helm: Path) -> None:
    docs = template(helm, "temporal.tls.enabled=false", "temporal.tls.serverName=x", "temporal.tls.secretName=t",
                    "temporal.tls.certKey=a", "temporal.tls.keyKey=b", "temporal.apiKey.value=k")
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    names = set(one(docs, "ConfigMap")["data"]) | {e["name"] for e in container["env"]}
    product = "\n".join(p.read_text() for room in ("worker", "activities") for p in (REPO / room).rglob("*.py"))
    expanded = " ".join(container["args"])  # $(NAME) in args: Kubernetes puts the value on the command line
    unread = sorted(n for n in names if f'"{n}"' not in product and f"$({n})" not in expanded)
    assert unread == [], f"the worker reads none of {unread}: a user's value would be silently ignored"


@pytest.mark.parametrize(("sets", "message"), [
    (["temporal.adress=x:1"], "at '/temporal': additional properties 'adress' not allowed"),
    (["schedulerBackend=volcano"], "at '/schedulerBackend': value must be one of"),
    (["watchNamespace=Team_A"], "at '/watchNamespace'"),
    (["replicaCount=-1"], "at '/replicaCount'"),
    (["temporal.address=no-port"], "at '/temporal/address'"),
    (["temporal.tls.secretName=t", "temporal.tls.certKey=tls.crt"], "temporal.tls.certKey, temporal.tls.keyKey"),
    (["temporal.apiKey.existingSecret=a", "temporal.apiKey.value=b"], "temporal.apiKey"),
])
def test_bad_values_are_refused_naming_the_field(helm: Path, sets: list[str], message: str) -> None:
    proc = run_helm(helm, "template", RELEASE, str(CHART), *[f"--set={s}" for s in sets])
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
