"""The namespace a command works in when none is given, as kubectl chooses it: the current context's namespace in
the kubeconfig ($KUBECONFIG, its first file that exists, else ~/.kube/config), else `default`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from grove.names import DEFAULT_NAMESPACE


def kubeconfig_paths() -> list[Path]:
    configured = os.environ.get("KUBECONFIG")
    if configured:
        return [Path(p).expanduser() for p in configured.split(os.pathsep) if p]
    return [Path.home() / ".kube" / "config"]


def context_namespace(paths: list[Path] | None = None) -> str:
    """The current context's namespace; `default` when there is none (or no readable kubeconfig)."""
    current: str | None = None
    contexts: dict[str, Any] = {}
    for path in paths if paths is not None else kubeconfig_paths():
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            continue
        # Merged as kubectl merges: the first file to set a value wins.
        current = current or data.get("current-context")
        for entry in data.get("contexts") or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                contexts.setdefault(entry["name"], entry.get("context") or {})
    namespace = (contexts.get(current or "") or {}).get("namespace")
    return namespace if isinstance(namespace, str) and namespace else DEFAULT_NAMESPACE
