"""Helpers for tests of admission: create PodCliqueSets on the real apiserver (dry run or for real) and read the
field paths of a refusal; and a PodCliqueSet CRD without the admission rules, to make objects as a cluster had
them before the rules existed (ratcheting)."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, cast

from kubernetes.client import ApiClient, ApiextensionsV1Api, CustomObjectsApi, V1CustomResourceDefinition
from kubernetes.client.exceptions import ApiException

from grove import crds, names
from tests.corpus.bad_manifests import base

GROVE = (names.GROVE_GROUP, names.GROVE_VERSION)
PCS_RESOURCE = next(r for r in crds.RESOURCES if r.kind == names.KIND_PODCLIQUESET)


class Refused(Exception):
    def __init__(self, status: int, message: str, fields: list[str]) -> None:
        super().__init__(f"{status} {message}")
        self.status, self.message, self.fields = status, message, fields


def create(kube: ApiClient, namespace: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Create a PodCliqueSet; raises Refused with the field paths of the apiserver's causes."""
    api = CustomObjectsApi(kube)
    try:
        created: dict[str, Any] = api.create_namespaced_custom_object(
            *GROVE, namespace, "podcliquesets", body, dry_run="All" if dry_run else None)
        return created
    except ApiException as error:
        raise _refused(error) from None


def replace_pcs(kube: ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    try:
        replaced: dict[str, Any] = CustomObjectsApi(kube).replace_namespaced_custom_object(
            *GROVE, namespace, "podcliquesets", body["metadata"]["name"], body)
        return replaced
    except ApiException as error:
        raise _refused(error) from None


def _refused(error: ApiException) -> Refused:
    try:
        status = json.loads(error.body or "{}")
    except ValueError:
        status = {}
    causes = (status.get("details") or {}).get("causes") or []
    return Refused(error.status, status.get("message") or str(error.reason),
                   [c.get("field", "") for c in causes])


@contextlib.contextmanager
def rules_suspended(kube: ApiClient, namespace: str) -> Iterator[None]:
    """The PodCliqueSet CRD as it was before the admission rules, for the duration; then the current one again.
    Waits each time until the apiserver serves the swapped schema (CRD updates take effect asynchronously)."""
    _put_crd(kube, crds.crd(replace(PCS_RESOURCE, admission_rules=False)))
    _wait_admission(kube, namespace, refuses=False)
    try:
        yield
    finally:
        _put_crd(kube, crds.crd(PCS_RESOURCE))
        _wait_admission(kube, namespace, refuses=True)


def _put_crd(kube: ApiClient, crd: dict[str, Any]) -> None:
    api = ApiextensionsV1Api(kube)
    name = crd["metadata"]["name"]
    live = api.read_custom_resource_definition(name)
    metadata = {**crd["metadata"], "resourceVersion": live.metadata.resource_version}
    api.replace_custom_resource_definition(name, cast(V1CustomResourceDefinition, {**crd, "metadata": metadata}))


def _wait_admission(kube: ApiClient, namespace: str, refuses: bool, timeout: float = 30) -> None:
    probe = base(f"probe-{uuid.uuid4().hex[:6]}")
    probe["spec"]["template"]["cliques"][0]["spec"]["replicas"] = 0  # refused by the clique-replicas rule only
    deadline = time.monotonic() + timeout
    while True:
        try:
            create(kube, namespace, probe, dry_run=True)
            refused = False
        except Refused:
            refused = True
        if refused == refuses:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the apiserver did not {'start' if refuses else 'stop'} applying the rules")
        time.sleep(0.2)
