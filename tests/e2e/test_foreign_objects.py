"""Look-alikes are not ours. Objects that carry every label of ours (managed-by=grove-temporal, part-of=<pcs>,
replica-index, even our scheduling gate) but are not owned by our objects survive everything the worker does to the
very replica they pretend to belong to: a breach termination, forced terminations (PCS replica and PCSG replica)
and scale-in. Same UID and same resourceVersion afterwards: nothing deleted, patched, or ungated.

The worker runs as deploy/'s ServiceAccount, which may delete and patch these kinds: RBAC cannot tell ours from
theirs, so ownership checks in the activities are what protects them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio.client import Client

from activities.kubeapi import JSON, PODCLIQUES, PODGANGS, PODS, SCALINGGROUPS, SERVICES, Kube, Resource
from grove import names
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, is_ready, pcs_manifest, wait_for
from workflows.messages import ControlResult, ForceTerminateRequest, Phase

PCS = "svc"
MARK = "intruder"
POD_SPEC = {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}


def lookalike_labels(replica: int, **extra: str) -> dict[str, str]:
    return {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: PCS,
            names.LABEL_PCS_REPLICA_INDEX: str(replica), **extra}


def plant(kube: Kube, namespace: str, replica: int) -> list[tuple[Resource, JSON]]:
    """Foreign objects dressed as replica `replica` of PCS svc; returns them as created."""
    prefix = f"{PCS}-{replica}-{MARK}"

    def create(resource: Resource, name: str, labels: dict[str, str], spec: JSON,
               owner: JSON | None = None) -> JSON:
        meta: JSON = {"name": name, "labels": labels}
        if owner is not None:
            meta["ownerReferences"] = [{"apiVersion": owner["apiVersion"], "kind": owner["kind"],
                                        "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"],
                                        "controller": True, "blockOwnerDeletion": True}]
        api_version = f"{resource.group}/{resource.version}" if resource.group else resource.version
        return kube.create(resource, namespace, {"apiVersion": api_version, "kind": resource.kind,
                                                 "metadata": meta, "spec": spec})

    pod = create(PODS, prefix, lookalike_labels(replica, **{names.LABEL_PODCLIQUE: f"{PCS}-{replica}-frontend",
                                                            names.LABEL_PODGANG: f"{PCS}-{replica}"}),
                 {**POD_SPEC, "schedulingGates": [{"name": names.SCHEDULING_GATE}]})
    pclq = create(PODCLIQUES, prefix, lookalike_labels(replica, **{names.LABEL_COMPONENT: "pcs-podclique"}),
                  {"roleName": "frontend", "replicas": 1, "podSpec": POD_SPEC})
    pcsg = create(SCALINGGROUPS, f"{prefix}-sg", lookalike_labels(replica, **{names.LABEL_COMPONENT:
                                                                               "pcs-podcliquescalinggroup"}),
                  {"replicas": 1, "minAvailable": 1, "cliqueNames": ["leader"]})
    # Owned, but by a foreign PodCliqueScalingGroup: "owned by some PCSG" is not "owned by ours".
    pcsg_pclq = create(PODCLIQUES, f"{prefix}-sg-0-leader",
                       lookalike_labels(replica, **{names.LABEL_COMPONENT: "pcsg-podclique"}),
                       {"roleName": "leader", "replicas": 1, "podSpec": POD_SPEC}, owner=pcsg)
    gang = create(PODGANGS, prefix, lookalike_labels(replica, **{names.LABEL_COMPONENT: "podgang"}),
                  {"podgroups": [{"name": f"{prefix}", "minReplicas": 1, "podReferences": []}]})
    service = create(SERVICES, prefix, lookalike_labels(replica), {"clusterIP": "None", "ports": [{"port": 80}]})
    return [(PODS, pod), (PODCLIQUES, pclq), (SCALINGGROUPS, pcsg), (PODCLIQUES, pcsg_pclq), (PODGANGS, gang),
            (SERVICES, service)]


def fingerprint(obj: JSON) -> tuple[str, str]:
    return obj["metadata"]["uid"], obj["metadata"]["resourceVersion"]


def ours_ready(cluster: Cluster, count: int) -> bool:
    pods = [p for p in cluster.pods() if MARK not in p["metadata"]["name"]]
    return len(pods) == count and all(is_ready(p) for p in pods)


async def test_lookalikes_survive_termination_forced_termination_and_scale_in(
        cluster: Cluster, sa_worker_process: WorkerProcess, temporal_client: Client) -> None:
    ns = cluster.namespace
    cluster.apply(pcs_manifest(PCS, ns, replicas=2, termination_delay="3s",
                               cliques=[clique("frontend", 2, 2), clique("leader", 1, 1)],
                               scaling_groups=[{"name": "sg", "replicas": 2, "minAvailable": 1,
                                                "cliqueNames": ["leader"]}]))
    wait_for(lambda: ours_ready(cluster, 8), timeout=60, what="8 Ready pods of ours")
    replica0 = Replica(temporal_client, cluster, PCS, 0)
    replica1 = Replica(temporal_client, cluster, PCS, 1)
    await replica0.wait_phase(Phase.AVAILABLE)
    planted = plant(cluster.kube, ns, 0) + plant(cluster.kube, ns, 1)
    before = {f"{r.kind}/{o['metadata']['name']}": fingerprint(o) for r, o in planted}

    # 1. A breach of replica 0 runs out its delay: the replica is gang-terminated and recreated.
    frontend = cluster.live_pclq_uids()[f"{PCS}-0-frontend"]
    cluster.fail_readiness(f"{PCS}-0-frontend-1")
    wait_for(lambda: cluster.live_pclq_uids().get(f"{PCS}-0-frontend") not in (None, frontend), timeout=30,
             what="replica 0 terminated and recreated")
    wait_for(lambda: ours_ready(cluster, 8), timeout=60, what="replica 0 Ready again")
    await replica0.wait_phase(Phase.AVAILABLE)

    # 2. Forced: one PCSG replica, then the whole PCS replica.
    for request in (ForceTerminateRequest(reason="foreign check", scaling_group="sg", scaling_group_replica=1),
                    ForceTerminateRequest(reason="foreign check")):
        result = await replica0.handle.execute_update("force_terminate", request, result_type=ControlResult)
        assert result.accepted and result.termination is not None, result
        wait_for(lambda: ours_ready(cluster, 8), timeout=60, what="replica 0 recreated after a forced termination")
    status = await replica0.wait_phase(Phase.AVAILABLE)
    assert status.terminations_total == 3

    # 3. Scale-in: replica 1's workflow deletes its replica and completes.
    cluster.patch_pcs(PCS, {"spec": {"replicas": 1}})
    await asyncio.wait_for(replica1.handle.result(), timeout=60)
    wait_for(lambda: ours_ready(cluster, 4), timeout=60, what="only replica 0's pods left")
    await asyncio.sleep(3)  # any late write of a still-running activity or a follow-up evaluation lands meanwhile

    after: dict[str, Any] = {}
    for resource, obj in planted:
        now = cluster.kube.get(resource, ns, obj["metadata"]["name"])
        after[f"{resource.kind}/{obj['metadata']['name']}"] = fingerprint(now) if now else None
    assert after == before, {k: (before[k], v) for k, v in after.items() if v != before[k]}
