"""Objects for the activity tests that create a replica's objects by hand on the real apiserver (no worker runs)."""

from __future__ import annotations

from typing import Any

from activities.kubeapi import PODCLIQUESETS, Kube
from grove import manifests, names
from grove.models import PodCliqueSet
from grove.plan import ReplicaPlan, plan_replica
from grove.validation import parse_pcs


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
