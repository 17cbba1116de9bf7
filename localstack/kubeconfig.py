"""Static-token identities of the local control plane and the kubeconfig files that carry them."""

from __future__ import annotations

import base64
import secrets
from dataclasses import dataclass, field
from pathlib import Path

import yaml


@dataclass(frozen=True)
class KubeUser:
    name: str
    groups: tuple[str, ...] = ()
    token: str = field(default_factory=lambda: secrets.token_hex(24))


def write_token_file(path: Path, users: list[KubeUser]) -> None:
    """kube-apiserver --token-auth-file: `token,user,uid,"group1,group2"` per line."""
    lines = [f'{u.token},{u.name},{u.name},"{",".join(u.groups)}"' for u in users]
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o600)


def write_kubeconfig(
    path: Path, server: str, ca_file: Path, user: KubeUser, cluster: str = "grove-temporal"
) -> None:
    """A self-contained kubeconfig (CA embedded) so it can be copied or exported as-is."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_file.read_bytes()).decode(),
                },
            }
        ],
        "users": [{"name": user.name, "user": {"token": user.token}}],
        "contexts": [{"name": cluster, "context": {"cluster": cluster, "user": user.name}}],
        "current-context": cluster,
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
