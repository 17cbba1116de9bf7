"""Objects for the activity tests that create a replica's objects by hand on the real apiserver (no worker runs)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from temporalio.testing import ActivityEnvironment

from activities.kubeapi import PODCLIQUESETS, Kube, Resource
from grove import manifests, names
from grove.models import PodCliqueSet
from grove.plan import ReplicaPlan, plan_replica
from grove.validation import parse_pcs

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


class CountingKube(Kube):
    """The real client, keeping (method, path) of every request it sends."""

    def __init__(self, api: ApiClient) -> None:
        super().__init__(api)
        self.seen: list[tuple[str, str]] = []

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.seen.append((method, path))
        return super()._request(method, path, **kwargs)

    def requests(self, method: str, plural: str) -> int:
        return sum(1 for m, p in self.seen if m == method and f"/{plural}" in p)


def live(client: Kube, resource: Resource, namespace: str, name: str) -> bool:
    """The object exists and is not being deleted."""
    found = client.get(resource, namespace, name)
    return found is not None and not found["metadata"].get("deletionTimestamp")


def attempt(number: int) -> ActivityEnvironment:
    """An activity context whose attempt is `number` (a retry from 2 on), started now with 60 s to run."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=number, started_time=datetime.now(UTC),
                                   start_to_close_timeout=timedelta(seconds=60))
    return env


def create_pcs(client: Kube, namespace: str, body: dict[str, Any]) -> tuple[PodCliqueSet, ReplicaPlan, dict[str, Any],
                                                                           dict[str, Any]]:
    """Parse and create a valid PodCliqueSet: (its model, replica 0's plan, the created object, an owner reference
    to it for the objects the test creates under it)."""
    model, problems = parse_pcs(body)
    assert model is not None and not problems, problems
    created = client.create(PODCLIQUESETS, namespace, body)
    owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUESET, body["metadata"]["name"],
                                      created["metadata"]["uid"])
    return model, plan_replica(model, 0), created, owner


def one_clique_pcs(namespace: str, name: str, replicas: int) -> dict[str, Any]:
    """A PodCliqueSet of `replicas` replicas, each one PodClique `a` of one pause pod (minAvailable 1)."""
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "template": {"cliques": [{"name": "a", "spec": {
                "roleName": "a", "replicas": 1, "minAvailable": 1, "podSpec": {
                    "containers": [{"name": "a", "image": "registry.k8s.io/pause:3.10"}]}}}]}}}
