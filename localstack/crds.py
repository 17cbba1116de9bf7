"""Install every CustomResourceDefinition found under deploy/crds/ and wait until the apiserver serves them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

import yaml
from kubernetes.client import ApiClient, ApiextensionsV1Api, V1CustomResourceDefinition
from kubernetes.client.exceptions import ApiException

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CRD_DIR = REPO_ROOT / "deploy" / "crds"


class CrdInstallError(RuntimeError):
    pass


def load_crds(directory: Path = DEFAULT_CRD_DIR) -> list[dict[str, object]]:
    """Every CustomResourceDefinition document in *.yaml / *.yml below `directory` (other kinds are an error)."""
    crds: list[dict[str, object]] = []
    if not directory.is_dir():
        return crds
    for path in sorted([*directory.rglob("*.yaml"), *directory.rglob("*.yml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                kind = doc.get("kind") if isinstance(doc, dict) else type(doc).__name__
                raise CrdInstallError(
                    f"{path}: expected only CustomResourceDefinition documents, found {kind}"
                )
            crds.append(doc)
    return crds


def _name(crd: dict[str, object]) -> str:
    metadata = crd.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    if not isinstance(name, str):
        raise CrdInstallError(f"a CustomResourceDefinition without metadata.name: {str(crd)[:200]}")
    return name


def _established(api: ApiextensionsV1Api, name: str) -> bool:
    status = api.read_custom_resource_definition(name).status
    conditions = (status.conditions if status else None) or []
    return any(c.type == "Established" and c.status == "True" for c in conditions)


def apply_crds(api_client: ApiClient, directory: Path = DEFAULT_CRD_DIR, timeout: float = 60.0) -> list[str]:
    """Create or replace each CRD, then wait until all are Established. Returns their names."""
    api = ApiextensionsV1Api(api_client)
    names = []
    for crd in load_crds(directory):
        name = _name(crd)
        try:
            # The client sends plain dicts as they are; the YAML is the source of truth, not the client's models.
            api.create_custom_resource_definition(cast(V1CustomResourceDefinition, crd))
        except ApiException as error:
            if error.status != 409:
                raise CrdInstallError(
                    f"creating CRD {name} failed: {error.status} {error.reason}: {error.body}"
                ) from error
            # Replace needs the live resourceVersion (optimistic concurrency), nothing else of the old object.
            live = api.read_custom_resource_definition(name)
            metadata = dict(cast(dict[str, object], crd["metadata"]))
            metadata["resourceVersion"] = live.metadata.resource_version if live.metadata else None
            api.replace_custom_resource_definition(
                name, cast(V1CustomResourceDefinition, {**crd, "metadata": metadata})
            )
        names.append(name)
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [n for n in pending if not _established(api, n)]
        if pending and time.monotonic() > deadline:
            raise CrdInstallError(f"CRDs not Established after {timeout:.0f}s: {', '.join(pending)}")
        if pending:
            time.sleep(0.1)
    return names
