"""What observe_replica reports as drift (the differences that make a replica workflow run ensure_replica)."""

from __future__ import annotations

from pathlib import Path

import yaml

from activities.observe import ClusterView, drift
from grove import names
from grove.manifests import owner_reference, scaling_group_manifest
from grove.models import PodCliqueSet
from grove.plan import plan_replica

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
WITH_GROUP = PodCliqueSet.model_validate(yaml.safe_load((EXAMPLES / "gang-termination.yaml").read_text()))


def _without_groups() -> PodCliqueSet:
    """The same PCS with its scaling group removed (its cliques become standalone)."""
    pcs = WITH_GROUP.model_copy(deep=True)
    pcs.spec.template.pod_clique_scaling_groups = []
    return pcs


def _view(owner_uid: str) -> ClusterView:
    plan = plan_replica(WITH_GROUP, 0)
    pcs = {"metadata": {"name": WITH_GROUP.metadata.name, "uid": "pcs-uid"}}
    owner = owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUESET, "inference", owner_uid)
    groups = {g.name: scaling_group_manifest(plan, g.name, owner=owner) for g in plan.scaling_groups}
    return ClusterView(pcs=pcs, pcsgs=groups)


def test_a_scaling_group_removed_from_the_spec_is_surplus_drift() -> None:
    """Without it no ensure_replica runs for a removed PCSG whose PodCliques are already gone, and its object stays."""
    found = drift(_view("pcs-uid"), plan_replica(_without_groups(), 0))
    group = plan_replica(WITH_GROUP, 0).scaling_groups[0].name
    assert f"surplus PodCliqueScalingGroup {group}" in found


def test_a_scaling_group_another_owner_controls_is_not_drift() -> None:
    found = drift(_view("someone-else"), plan_replica(_without_groups(), 0))
    assert not [f for f in found if "PodCliqueScalingGroup" in f]
