"""The floor of `bench scale`: the least any controller must do, on the same apiserver, between a scale write on a
PodCliqueScalingGroup and the new replica's scheduling gates gone.

Run as its own process (`python -m bench.scale_floor --kubeconfig K --namespace NS`) with the product's client stack
(kubernetes.client.ApiClient under activities.kubeapi.Kube). One thread, no Temporal, no reads beyond the watch: when
the watch shows a PCSG's spec.replicas above the count it has built, it creates what the product creates for each
new replica, from the product's own plan and manifests and in the product's order (the replica's PodCliques, its
scaled PodGang, its gated pods), then removes the gates with the product's patch (strategic merge deleting only our
gate, UID precondition). The base gang is already scheduled when the benchmark scales, so nothing is waited for.
"""

from __future__ import annotations

import argparse

from activities.kubeapi import JSON, PODCLIQUES, PODGANGS, PODS, SCALINGGROUPS, Kube, ListWatch
from grove import manifests, names
from grove.models import PodCliqueSet
from grove.plan import ReplicaPlan, plan_replica
from grove.scale import ObservedCounts
from grove.validation import parse_pcs


def scale_shape(name: str, namespace: str) -> JSON:
    """The PodCliqueSet both sides scale: a router and PCSG replica 0 (leader + 2 workers) in the base gang; each
    further PCSG replica is a scaled gang of 3 pods."""
    from bench.workload import clique, pcs_manifest

    return pcs_manifest(name, namespace, replicas=1,
                        cliques=[clique("router", 1), clique("leader", 1), clique("worker", 2)],
                        scaling_groups=[{"name": "sg", "replicas": 1, "minAvailable": 1,
                                         "cliqueNames": ["leader", "worker"]}])


def pcsg_of(pcs: str) -> str:
    return names.pcsg_name(pcs, 0, "sg")


def scaling_group_object(pcs_name: str, namespace: str) -> JSON:
    """The PCSG object the benchmark creates on the floor's side (no PodCliqueSet there: nobody else acts on it)."""
    pcs, problems = parse_pcs(scale_shape(pcs_name, namespace))
    assert pcs is not None and not problems, problems
    return manifests.scaling_group_manifest(plan_replica(pcs, 0), pcsg_of(pcs_name))


class ScaleFloor:
    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.built: dict[str, int] = {}  # PCSG name -> replicas built

    def on_group(self, group: JSON) -> None:
        meta = group["metadata"]
        name = meta["name"]
        replicas = (group.get("spec") or {}).get("replicas") or 0
        if name not in self.built:  # first sight: what exists already is the template's
            self.built[name] = replicas
            return
        if replicas <= self.built[name]:
            return
        pcs_name = (meta.get("labels") or {})[names.LABEL_PART_OF]
        pcs, _ = parse_pcs(scale_shape(pcs_name, self.namespace))
        assert pcs is not None
        plan = plan_replica(pcs, 0, ObservedCounts(scaling_groups={name: replicas}))
        for j in range(self.built[name], replicas):
            self.build(pcs, plan, name, j)
        self.built[name] = replicas

    def build(self, pcs: PodCliqueSet, plan: ReplicaPlan, pcsg: str, j: int) -> None:
        pclqs = [p for p in plan.pod_cliques if p.scaling_group is not None and p.scaling_group.name == pcsg
                 and p.scaling_group.replica_index == j]
        for pclq in pclqs:
            self.kube.create(PODCLIQUES, self.namespace, manifests.podclique_manifest(pcs, plan, pclq.name))
        gang = pclqs[0].pod_gang
        self.kube.create(PODGANGS, self.namespace, manifests.podgang_manifest(plan, gang))
        created = []
        for pclq in pclqs:
            for index in range(len(pclq.pod_names)):
                pod = self.kube.create(PODS, self.namespace, manifests.pod_manifest(pcs, plan, pclq.name, index))
                created.append((pod["metadata"]["name"], pod["metadata"]["uid"]))
        for pod_name, uid in created:
            patch = {"metadata": {"uid": uid},
                     "spec": {"schedulingGates": [{"$patch": "delete", "name": names.SCHEDULING_GATE}]}}
            self.kube.patch(PODS, self.namespace, pod_name, patch,
                            content_type="application/strategic-merge-patch+json")

    def run(self) -> None:
        def on_event(kind: str, group: JSON, _relisted: bool) -> None:
            if kind in ("ADDED", "MODIFIED"):
                self.on_group(group)

        def synced(_items: object) -> None:
            print("scale floor: watching", flush=True)

        ListWatch(self.kube, SCALINGGROUPS, self.namespace, on_event, on_synced=synced,
                  watch_timeout_seconds=3600).run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    args = parser.parse_args()
    from activities.kubeapi import api_client

    ScaleFloor(Kube(api_client(args.kubeconfig)), args.namespace).run()


if __name__ == "__main__":
    main()
