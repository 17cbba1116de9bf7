"""Issue 13 end to end: replica counts written through the scale subresource (as `kubectl scale` and an HPA write
them) are kept and acted on; HorizontalPodAutoscalers follow the config, and kube-controller-manager's own HPA
controller scales a PodCliqueScalingGroup through them; template changes seed only objects created afterwards.
Assertions come from watches (harness.Timeline) and reads of the real objects."""

from __future__ import annotations

import time

from temporalio.client import Client

from activities.kubeapi import HPAS, JSON, PODCLIQUES, PODCLIQUESETS, SCALINGGROUPS
from grove import names
from tests.e2e.conftest import Histories
from tests.e2e.harness import (
    Cluster,
    Replica,
    Timeline,
    WorkerProcess,
    clique,
    describe,
    is_gated,
    pcs_manifest,
    wait_for,
)
from workflows.messages import Phase


def scale(cluster: Cluster, resource: object, name: str, replicas: int) -> JSON:
    """What `kubectl scale --replicas=N` sends: a merge patch of the scale subresource."""
    return cluster.kube.patch(resource, cluster.namespace, name, {"spec": {"replicas": replicas}},  # type: ignore[arg-type]
                              subresource="scale")


def spec_replicas(cluster: Cluster, resource: object, name: str) -> int | None:
    obj = cluster.kube.get(resource, cluster.namespace, name)  # type: ignore[arg-type]
    return None if obj is None else (obj.get("spec") or {}).get("replicas")


def live_pclqs(cluster: Cluster) -> set[str]:
    return set(cluster.live_pclq_uids())


def held(cluster: Cluster, resource: object, name: str, replicas: int, seconds: float = 4.0) -> None:
    """The written count stays (the issue's bug: a PodClique's count was reverted to the template within seconds)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert spec_replicas(cluster, resource, name) == replicas, f"{name}: spec.replicas was changed"
        time.sleep(0.25)


def sg_manifest(cluster: Cluster, name: str, *, sg_replicas: int = 3, scale_config: JSON | None = None,
                replicas: int = 1) -> JSON:
    group: JSON = {"name": "sg", "replicas": sg_replicas, "minAvailable": 2, "cliqueNames": ["leader", "worker"]}
    if scale_config is not None:
        group["scaleConfig"] = scale_config
    return pcs_manifest(name, cluster.namespace, replicas=replicas,
                        cliques=[clique("router", 1, 1), clique("leader", 1, 1), clique("worker", 2, 2)],
                        scaling_groups=[group])


async def test_a_pcsg_scaled_through_the_scale_subresource_gets_and_loses_scaled_gangs(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    cluster.apply(sg_manifest(cluster, "sc"))
    wait_for(lambda: cluster.ready_pods(1 + 3 * 3), timeout=90, what="router + 3 sg replicas Ready")
    await Replica(temporal_client, cluster, "sc").wait_phase(Phase.AVAILABLE)

    # Up: 3 -> 5. Two new PCSG replicas, each its own scaled PodGang, released once the base gang is scheduled.
    written = time.time()
    scale(cluster, SCALINGGROUPS, "sc-0-sg", 5)
    wait_for(lambda: cluster.ready_pods(1 + 5 * 3), timeout=90, what="5 sg replicas Ready")
    assert {"sc-0-sg-0", "sc-0-sg-1", "sc-0-sg-2"} <= set(cluster.pod_gangs())
    new_pods = [f"sc-0-sg-{j}-{c}-{i}" for j in (3, 4) for c, n in (("leader", 1), ("worker", 2)) for i in range(n)]
    released = timeline.latencies("Pod", new_pods, "seen", "ungated", since=written)
    write_to_release = [timeline.of("Pod", p)[-1]["ungated"] - written for p in new_pods]
    assert len(released) == len(new_pods) and all(lat > 0 for lat in write_to_release)
    print(f"\nPCSG scale 3→5: scale write → scaled gates released {describe(write_to_release)}")
    gang = cluster.pod_gangs()["sc-0-sg-2"]
    assert gang["metadata"]["labels"][names.LABEL_PCSG_REPLICA_INDEX] == "4"
    assert sorted(r["name"] for g in gang["spec"]["podgroups"] for r in g["podReferences"]) == sorted(
        p for p in new_pods if p.startswith("sc-0-sg-4-"))
    held(cluster, SCALINGGROUPS, "sc-0-sg", 5)
    pcsg = cluster.kube.get(SCALINGGROUPS, cluster.namespace, "sc-0-sg")
    assert pcsg is not None
    wait_for(lambda: ((cluster.kube.get(SCALINGGROUPS, cluster.namespace, "sc-0-sg") or {}).get("status") or {})
             .get("replicas") == 5, timeout=20, what="PCSG status.replicas 5")
    selector = cluster.kube.get(SCALINGGROUPS, cluster.namespace, "sc-0-sg")["status"]["selector"]  # type: ignore[index]
    assert {p["metadata"]["name"] for p in cluster.pods(selector)} == {
        p["metadata"]["name"] for p in cluster.pods() if "-sg-" in p["metadata"]["name"]}

    # Down: 5 -> 2. The highest indices go first, with their scaled PodGangs; the base gang stays.
    shrink_began = time.time()
    scale(cluster, SCALINGGROUPS, "sc-0-sg", 2)
    wait_for(lambda: cluster.ready_pods(1 + 2 * 3), timeout=90, what="2 sg replicas left")
    wait_for(lambda: not any(g.startswith("sc-0-sg-") for g in cluster.pod_gangs()), timeout=30,
             what="scaled PodGangs deleted")
    assert not any(n.startswith(("sc-0-sg-2-", "sc-0-sg-3-", "sc-0-sg-4-")) for n in live_pclqs(cluster))
    deleting = {j: min(timeline.of("PodClique", f"sc-0-sg-{j}-{c}")[-1]["deleting"] for c in ("leader", "worker"))
                for j in (2, 3, 4)}
    assert all(at >= shrink_began for at in deleting.values())
    assert deleting[4] <= deleting[3] <= deleting[2], f"scale-in order by deletion time: {deleting}"

    # Below minAvailable (2): clamped to 2, written back and reported.
    scale(cluster, SCALINGGROUPS, "sc-0-sg", 1)
    wait_for(lambda: spec_replicas(cluster, SCALINGGROUPS, "sc-0-sg") == 2, timeout=30,
             what="PCSG count clamped back to minAvailable")
    assert cluster.ready_pods(1 + 2 * 3) is not None
    events = cluster.events("ScaleClamped")
    assert events and "below its minAvailable; kept at 2" in events[-1]["message"], events
    status = await Replica(temporal_client, cluster, "sc").status()
    assert status.terminations_total == 0
    await histories.keep(Replica(temporal_client, cluster, "sc").handle, "pcsg_scale_subresource")


async def test_a_podclique_scaled_through_the_scale_subresource_keeps_its_count(
        cluster: Cluster, worker_process: WorkerProcess, timeline: Timeline) -> None:
    cluster.apply(pcs_manifest("pc", cluster.namespace, cliques=[clique("app", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")
    written = time.time()
    scale(cluster, PODCLIQUES, "pc-0-app", 4)
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    held(cluster, PODCLIQUES, "pc-0-app", 4)
    lat = timeline.latencies("Pod", ["pc-0-app-2", "pc-0-app-3"], "seen", "ready", since=written)
    assert len(lat) == 2
    wait_for(lambda: ((cluster.pclq("pc-0-app") or {}).get("status") or {}).get("replicas") == 4, timeout=20,
             what="PodClique status.replicas 4")
    selector = (cluster.pclq("pc-0-app") or {})["status"]["hpaPodSelector"]
    assert sorted(p["metadata"]["name"] for p in cluster.pods(selector)) == [f"pc-0-app-{i}" for i in range(4)]
    scale(cluster, PODCLIQUES, "pc-0-app", 1)
    wait_for(lambda: [p["metadata"]["name"] for p in cluster.pods()] == ["pc-0-app-0"], timeout=60,
             what="only pod index 0 left")
    held(cluster, PODCLIQUES, "pc-0-app", 1)


async def test_a_template_change_seeds_only_objects_created_afterwards(
        cluster: Cluster, worker_process: WorkerProcess) -> None:
    """Grove's rule: the PCS template sets PCSG and PodClique replicas at creation only."""
    manifest = sg_manifest(cluster, "seed", sg_replicas=2)
    cluster.apply(manifest)
    wait_for(lambda: cluster.ready_pods(1 + 2 * 3), timeout=90, what="replica 0 Ready")
    template = manifest["spec"]["template"]
    template["podCliqueScalingGroups"][0]["replicas"] = 3
    template["cliques"][0]["spec"]["replicas"] = 2
    cluster.patch_pcs("seed", {"spec": {"replicas": 2, "template": template}})
    wait_for(lambda: cluster.ready_pods(7 + 2 + 3 * 3), timeout=90, what="replica 1 Ready from the new template")
    assert spec_replicas(cluster, SCALINGGROUPS, "seed-0-sg") == 2 and spec_replicas(
        cluster, PODCLIQUES, "seed-0-router") == 1
    assert spec_replicas(cluster, SCALINGGROUPS, "seed-1-sg") == 3 and spec_replicas(
        cluster, PODCLIQUES, "seed-1-router") == 2


def hpa(cluster: Cluster, name: str) -> JSON | None:
    return cluster.kube.get(HPAS, cluster.namespace, name)


async def test_hpas_follow_the_config_and_the_hpa_controller_scales_the_pcsg(
        cluster: Cluster, worker_process: WorkerProcess, timeline: Timeline) -> None:
    """minReplicas above the template's replicas: kube-controller-manager's HPA controller raises the PCSG to it
    through the scale subresource (no metrics server is needed for that), and the new replica gets its gang."""
    manifest = sg_manifest(cluster, "auto", sg_replicas=2, replicas=2,
                           scale_config={"minReplicas": 3, "maxReplicas": 4})
    manifest["spec"]["template"]["cliques"][0]["spec"]["autoScalingConfig"] = {"maxReplicas": 3}
    cluster.apply(manifest)
    pcs = cluster.pcs("auto")
    assert pcs is not None
    wait_for(lambda: hpa(cluster, "auto-1-sg"), timeout=30, what="HPAs created")
    for name, kind, low, high in (("auto-0-sg", "PodCliqueScalingGroup", 3, 4), ("auto-0-router", "PodClique", 1, 3)):
        obj = hpa(cluster, name)
        assert obj is not None, name
        assert obj["spec"]["scaleTargetRef"] == {"apiVersion": "grove.io/v1alpha1", "kind": kind, "name": name}
        assert (obj["spec"]["minReplicas"], obj["spec"]["maxReplicas"]) == (low, high)
        owner = obj["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("PodCliqueSet", pcs["metadata"]["uid"], True)
    # The HPA controller enforces minReplicas 3 on the PCSG (created with 2): a third replica, a scaled gang.
    wait_for(lambda: spec_replicas(cluster, SCALINGGROUPS, "auto-0-sg") == 3, timeout=90,
             what="HPA controller scaled auto-0-sg to minReplicas 3")
    wait_for(lambda: all(not is_gated(p) for p in cluster.pods_of("auto-0-sg-2-worker")) and len(
        cluster.pods_of("auto-0-sg-2-worker")) == 2, timeout=60, what="the HPA-made replica's pods released")
    assert "auto-0-sg-0" in cluster.pod_gangs()

    template = manifest["spec"]["template"]
    template["podCliqueScalingGroups"][0]["scaleConfig"]["maxReplicas"] = 5
    del template["cliques"][0]["spec"]["autoScalingConfig"]
    cluster.patch_pcs("auto", {"spec": {"template": template}})
    wait_for(lambda: (hpa(cluster, "auto-0-sg") or {}).get("spec", {}).get("maxReplicas") == 5, timeout=30,
             what="HPA maxReplicas updated")
    wait_for(lambda: hpa(cluster, "auto-0-router") is None and hpa(cluster, "auto-1-router") is None, timeout=30,
             what="clique HPAs removed with their config")
    cluster.patch_pcs("auto", {"spec": {"replicas": 1}})
    wait_for(lambda: hpa(cluster, "auto-1-sg") is None, timeout=30, what="replica 1's HPA removed on scale-in")
    assert hpa(cluster, "auto-0-sg") is not None
    assert any(e.get("reason") == "AutoscalersSynced" for e in cluster.events())


async def test_grove_fields_not_implemented_get_a_condition_and_an_event_and_the_rest_runs(
        cluster: Cluster, worker_process: WorkerProcess) -> None:
    manifest = pcs_manifest("unsup", cluster.namespace, cliques=[clique("app", 1, 1)])
    template = manifest["spec"]["template"]
    template["topologyConstraint"] = {"pack": {"required": "rack"}}
    template["cliques"][0]["resourceSharing"] = [{"name": "gpu", "scope": "PerReplica"}]
    template["priorityClassName"] = ""
    cluster.apply(manifest)
    wait_for(lambda: cluster.ready_pods(1), timeout=60, what="the pod runs")
    condition = wait_for(lambda: cluster.condition("pcs", "unsup", names.CONDITION_UNSUPPORTED_FIELDS), timeout=30,
                         what="UnsupportedFields condition")
    assert condition["status"] == "True" and condition["reason"] == names.REASON_UNSUPPORTED_FIELDS
    assert "spec.template.topologyConstraint: not implemented" in condition["message"]
    assert "spec.template.cliques[0].resourceSharing: not implemented" in condition["message"]
    events = wait_for(lambda: cluster.events("UnsupportedFields"), timeout=10, what="UnsupportedFields Event")
    assert events[0]["type"] == "Warning" and "spec.template.topologyConstraint" in events[0]["message"]
    stored = cluster.pcs("unsup") or {}
    assert stored["spec"]["template"]["topologyConstraint"] == {"pack": {"required": "rack"}}, "kept as written"

    cluster.kube.patch(PODCLIQUESETS, cluster.namespace, "unsup",
                       [{"op": "remove", "path": "/spec/template/topologyConstraint"},
                        {"op": "remove", "path": "/spec/template/cliques/0/resourceSharing"}],
                       content_type="application/json-patch+json")
    wait_for(lambda: (cluster.condition("pcs", "unsup", names.CONDITION_UNSUPPORTED_FIELDS) or {}).get("status")
             == "False", timeout=30, what="UnsupportedFields=False once the fields are gone")


async def test_a_scale_write_over_the_name_limit_is_clamped_and_never_half_created(
        cluster: Cluster, worker_process: WorkerProcess, timeline: Timeline) -> None:
    """Pod names are hostnames and PodClique names are label values: both at most 63 characters. With a 47-character
    PCS name, `<pcs>-0-sg-9-leader-0` is 63 characters, so PCSG `sg` fits 10 replicas and a write of 12 is kept at
    10: written back and reported, replica 10 and 11 never created (not even partly)."""
    name = "name-limit-" + "x" * 36
    pcsg = f"{name}-0-sg"
    group = {"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["leader"]}
    cluster.apply(pcs_manifest(name, cluster.namespace, cliques=[clique("router", 1, 1), clique("leader", 1, 1)],
                               scaling_groups=[group]))
    wait_for(lambda: cluster.ready_pods(3), timeout=60, what="3 Ready pods")
    scale(cluster, SCALINGGROUPS, pcsg, 12)
    wait_for(lambda: spec_replicas(cluster, SCALINGGROUPS, pcsg) == 10, timeout=60,
             what="PCSG count clamped to the name limit")
    wait_for(lambda: cluster.ready_pods(11), timeout=120, what="11 Ready pods (router + 10 sg replicas)")
    held(cluster, SCALINGGROUPS, pcsg, 10)
    pods = [p["metadata"]["name"] for p in cluster.pods()]
    assert max(len(p) for p in pods) == names.MAX_NAME_LENGTH, pods
    assert f"{pcsg}-9-leader-0" in pods
    assert not [k for k in cluster.inventory() if f"{pcsg}-10-" in k or f"{pcsg}-11-" in k]
    for never in (f"{pcsg}-10-leader", f"{pcsg}-11-leader"):
        assert timeline.of("PodClique", never) == [], f"{never} was created"
    events = cluster.events("ScaleClamped")
    assert events and (f"PodCliqueScalingGroup {pcsg}: spec.replicas 12 would generate names over 63 characters"
                       in events[-1]["message"]) and "kept at 10" in events[-1]["message"], events
