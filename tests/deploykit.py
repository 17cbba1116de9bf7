"""deploy/ as the tests use it: kubectl from the binary cache, the kustomize build, a real apply, and a kubeconfig
for the worker's ServiceAccount holding a token from the TokenRequest API (what a pod's projected token is).

The Deployment is applied with zero replicas: no container engine exists here to build its image, and KWOK would
otherwise report a pod of it Running without running anything.
"""

from __future__ import annotations

import copy
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
NAMESPACE = "grove-temporal"
SERVICE_ACCOUNT = "grove-temporal"
CLUSTER_ROLE = "grove-temporal-worker"
LEASE_ROLE = "grove-temporal-leader-election"
FIELD_MANAGER = "grove-temporal-tests"

Doc = dict[str, Any]


def kubectl_path() -> Path:
    from localstack.binaries import path_of

    return path_of("kubectl")


def kubectl(kubeconfig: Path | str, *args: str, stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(kubectl_path()), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
    return proc


def build() -> list[Doc]:
    """`kubectl kustomize deploy/`: the documents `kubectl apply -k deploy/` would send."""
    out = subprocess.run([str(kubectl_path()), "kustomize", str(DEPLOY)], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def find(docs: list[Doc], kind: str, name: str | None = None) -> Doc:
    matches = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(matches) == 1, f"expected one {kind} {name or ''} in deploy/, found {len(matches)}"
    return matches[0]


def apply(kubeconfig: Path | str) -> list[Doc]:
    """Apply deploy/ for real (server-side, idempotent), the Deployment scaled to zero. Returns what was applied."""
    docs = copy.deepcopy(build())
    find(docs, "Deployment")["spec"]["replicas"] = 0
    kubectl(kubeconfig, "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-",
            stdin=yaml.safe_dump_all(docs))
    return docs


@dataclass(frozen=True)
class ClusterAccess:
    server: str
    ca_data: str  # base64 PEM, as kubeconfigs carry it


def cluster_access(admin_kubeconfig: Path | str) -> ClusterAccess:
    config = yaml.safe_load(Path(admin_kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    return ClusterAccess(cluster["server"], cluster["certificate-authority-data"])


def request_token(admin_kubeconfig: Path | str, *, seconds: int = 86400) -> str:
    """A bound token for deploy/'s ServiceAccount from the TokenRequest API (`kubectl create token` calls it); a
    day, so a long session-scoped fixture never outlives it."""
    proc = kubectl(admin_kubeconfig, "create", "token", SERVICE_ACCOUNT, "-n", NAMESPACE, f"--duration={seconds}s")
    return proc.stdout.strip()


def write_kubeconfig(path: Path, access: ClusterAccess, token: str, user: str = SERVICE_ACCOUNT) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": access.server,
                                                   "certificate-authority-data": access.ca_data}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path

