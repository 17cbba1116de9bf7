"""S11: PCS replicas 2→3→1 and PCSG replicas 5→6→4 (written through each PCSG's scale subresource, as
`kubectl scale` or an HPA does: the PCSG owns its count after creation, DESIGN §4.10) converge to exactly the planned
objects (grove.plan is the reference, with the counts stored on the objects); surplus replica workflows complete
with phase ScaledIn, surplus objects go, kept objects keep their UIDs."""

from __future__ import annotations

import asyncio
import time

from temporalio.client import Client

from activities.kubeapi import PODCLIQUES, SCALINGGROUPS, SERVICES
from grove.plan import plan_replica
from grove.scale import observed_counts
from grove.validation import parse_pcs
from tests.e2e.conftest import Histories
from tests.e2e.harness import (
    Cluster,
    Replica,
    WorkerProcess,
    clique,
    is_gated,
    is_ready,
    pcs_manifest,
    wait_for,
)
from workflows.contract import reconciler_workflow_id
from workflows.messages import Phase, ReplicaOutcome

PCS = "scale"


def _planned(cluster: Cluster) -> dict[str, set[str]]:
    obj = cluster.pcs(PCS)
    assert obj is not None
    pcs, problems = parse_pcs(obj)
    assert pcs is not None and not problems, problems
    groups = [g for g in cluster.kube.list_items(SCALINGGROUPS, cluster.namespace)]
    pclqs = [p for p in cluster.kube.list_items(PODCLIQUES, cluster.namespace)]
    counts = observed_counts(groups, pclqs)
    plans = [plan_replica(pcs, i, counts) for i in range(pcs.spec.replicas)]
    return {
        "PodClique": {p.name for plan in plans for p in plan.pod_cliques},
        "PodCliqueScalingGroup": {g.name for plan in plans for g in plan.scaling_groups},
        "PodGang": {g.name for plan in plans for g in plan.pod_gangs},
        "Pod": {pod for plan in plans for p in plan.pod_cliques for pod in p.pod_names},
        "Service": {plan.service.name for plan in plans},
    }


def _live(cluster: Cluster) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {k: set() for k in ("PodClique", "PodCliqueScalingGroup", "PodGang", "Pod")}
    for key in cluster.inventory():
        kind, name = key.split("/", 1)
        found[kind].add(name)
    found["Service"] = {s["metadata"]["name"] for s in cluster.kube.list_items(SERVICES, cluster.namespace)
                        if not s["metadata"].get("deletionTimestamp")}
    return found


def _converged(cluster: Cluster) -> dict[str, set[str]] | None:
    """The live objects, when they are exactly the planned ones and every pod is released and Ready."""
    planned, live = _planned(cluster), _live(cluster)
    if live != planned:
        return None
    pods = cluster.pods()
    return live if all(is_ready(p) and not is_gated(p) for p in pods) else None


def _wait_converged(cluster: Cluster, what: str) -> dict[str, str]:
    began = time.monotonic()
    steps: list[tuple[float, list[str]]] = []

    def check() -> dict[str, set[str]] | None:
        planned, live = _planned(cluster), _live(cluster)
        diff = sorted(f"{k}: extra {len(live[k] - planned[k])}, missing {len(planned[k] - live[k])}"
                      for k in planned if live[k] != planned[k])
        if not steps or diff != steps[-1][1]:
            steps.append((time.monotonic() - began, diff))
        return _converged(cluster)

    wait_for(check, timeout=90, interval=0.2, what=f"converged: {what}")
    took = time.monotonic() - began
    print(f"S11 {what}: converged to the plan in {took:.1f}s")
    if took > 5:  # say what it waited for
        for at, diff in steps:
            print(f"    {at:5.1f}s {'; '.join(diff) or 'names match, pods not all Ready yet'}")
    return cluster.inventory()


def _kept(before: dict[str, str], after: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    """Objects present before and after whose UID changed (there should be none)."""
    return {k: (v, after[k]) for k, v in before.items() if k in after and after[k] != v}


def _wait_generation_observed(cluster: Cluster) -> None:
    """The PCS's status.observedGeneration reaches its generation: the reconciler has judged the spec as it stands
    and started every replica's workflow for it (as `kubectl wait --for=jsonpath=...` or a GitOps tool checks)."""
    def observed() -> bool:
        obj = cluster.pcs(PCS) or {}
        return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]

    wait_for(observed, timeout=30, what="status.observedGeneration == metadata.generation")


def _scale_sg(cluster: Cluster, replicas: int) -> None:
    """`kubectl scale pcsg scale-<i>-sg --replicas=N` for every PCS replica."""
    for group in cluster.kube.list_items(SCALINGGROUPS, cluster.namespace):
        cluster.kube.patch(SCALINGGROUPS, cluster.namespace, group["metadata"]["name"],
                           {"spec": {"replicas": replicas}}, subresource="scale")


async def test_scale_pcs_and_pcsg_replicas_up_and_down(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, histories: Histories) -> None:
    manifest = pcs_manifest(
        PCS, cluster.namespace, replicas=2,
        cliques=[clique("router", 1, 1), clique("leader", 1, 1), clique("worker", 1, 1)],
        scaling_groups=[{"name": "sg", "replicas": 5, "minAvailable": 3, "cliqueNames": ["leader", "worker"]}],
    )
    cluster.apply(manifest)
    inventory = _wait_converged(cluster, "replicas 2, PCSG replicas 5")
    assert len(cluster.pods()) == 22
    _wait_generation_observed(cluster)

    cluster.patch_pcs(PCS, {"spec": {"replicas": 3}})
    after = _wait_converged(cluster, "replicas 2→3")
    _wait_generation_observed(cluster)
    assert len(cluster.pods()) == 33 and _kept(inventory, after) == {}
    await Replica(temporal_client, cluster, PCS, 2).wait_phase(Phase.AVAILABLE)
    inventory = after

    _scale_sg(cluster, 6)
    after = _wait_converged(cluster, "PCSG replicas 5→6")
    assert len(cluster.pods()) == 39 and _kept(inventory, after) == {}
    assert {f"{PCS}-{i}-sg-2" for i in range(3)} <= set(cluster.pod_gangs()), "a third scaled gang per replica"
    inventory = after

    _scale_sg(cluster, 4)
    after = _wait_converged(cluster, "PCSG replicas 6→4")
    assert len(cluster.pods()) == 27 and _kept(inventory, after) == {}
    assert not any(k.startswith(f"PodClique/{PCS}-{i}-sg-{j}-") for k in after for i in range(3) for j in (4, 5))
    inventory = after

    scaled_in = [Replica(temporal_client, cluster, PCS, i) for i in (1, 2)]
    cluster.patch_pcs(PCS, {"spec": {"replicas": 1}})
    after = _wait_converged(cluster, "replicas 3→1")
    assert len(cluster.pods()) == 9 and _kept(inventory, after) == {}
    assert not any("-1-" in k or "-2-" in k or k.endswith(("-1", "-2")) for k in after if "sg-" not in k), after
    for replica in scaled_in:
        handle = temporal_client.get_workflow_handle(replica.workflow_id, result_type=ReplicaOutcome)
        outcome = await asyncio.wait_for(handle.result(), timeout=30)
        assert outcome.phase is Phase.SCALED_IN, outcome
    assert {e["message"].split(":")[0] for e in cluster.events("ReplicaScaledIn")} == {"replica 1", "replica 2"}
    status = await Replica(temporal_client, cluster, PCS, 0).status()
    assert status.phase is Phase.AVAILABLE and status.terminations_total == 0
    await histories.keep(scaled_in[1].handle, "s11_scaled_in")
    await histories.keep(temporal_client.get_workflow_handle(reconciler_workflow_id(cluster.namespace)),
                         "s11_reconciler")
    await histories.keep(Replica(temporal_client, cluster, PCS, 0).handle, "s11_pcsg_scaling")
