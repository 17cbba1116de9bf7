"""The floor of B1: the least any controller must do to release the same gates on the same apiserver.

Run as its own process (`python -m bench.floor --kubeconfig K --namespace NS --base-pods 4`) with the product's
client stack (kubernetes.client.ApiClient under activities.kubeapi.Kube). One thread, no Temporal, no reads
beyond the watch: a base pod is ungated the moment its ADDED event arrives; the scaled pods of a gang are ungated
the moment the watch shows every one of its base gang's pods bound to a node. Same patch as the product's
release_gates (strategic merge deleting only our gate, with a UID precondition).

`create_replica` (used by the benchmark, not by this script) creates the very pods the product would create for
one replica, from the product's own plan, in the product's order.
"""

from __future__ import annotations

import argparse
import subprocess
from collections import defaultdict
from pathlib import Path

from activities.kubeapi import JSON, PODS, Kube, ListWatch, pod_gated
from bench import procs
from grove import manifests, names
from grove.plan import plan_replica
from grove.validation import parse_pcs


def create_replica(kube: Kube, manifest: JSON) -> list[str]:
    """Create the gated pods of replica 0 of `manifest` (a PCS that is never applied); returns their names."""
    pcs, problems = parse_pcs(manifest)
    assert pcs is not None and not problems, problems
    plan = plan_replica(pcs, 0)
    namespace = manifest["metadata"]["namespace"]
    created = []
    for pclq in plan.pod_cliques:
        for index in range(len(pclq.pod_names)):
            body = manifests.pod_manifest(pcs, plan, pclq.name, index)
            kube.create(PODS, namespace, body)
            created.append(body["metadata"]["name"])
    return created


class Floor:
    def __init__(self, kube: Kube, namespace: str, base_pods: int) -> None:
        self.kube = kube
        self.namespace = namespace
        self.base_pods = base_pods
        self.released: set[str] = set()  # pod UIDs patched
        self.scheduled: dict[str, set[str]] = defaultdict(set)  # base gang -> names of its bound base pods
        self.waiting: dict[str, dict[str, str]] = defaultdict(dict)  # base gang -> scaled pod name -> uid

    def release(self, name: str, uid: str) -> None:
        if uid in self.released:
            return
        self.released.add(uid)
        patch = {"metadata": {"uid": uid},
                 "spec": {"schedulingGates": [{"$patch": "delete", "name": names.SCHEDULING_GATE}]}}
        self.kube.patch(PODS, self.namespace, name, patch, content_type="application/strategic-merge-patch+json")

    def on_pod(self, pod: JSON) -> None:
        meta = pod["metadata"]
        labels = meta.get("labels") or {}
        name, uid = meta["name"], meta["uid"]
        if meta.get("deletionTimestamp"):
            return
        base_gang = labels.get(names.LABEL_BASE_PODGANG)
        if base_gang is None:  # a base pod
            gang = labels.get(names.LABEL_PODGANG, "")
            if pod_gated(pod):
                self.release(name, uid)
            elif (pod.get("spec") or {}).get("nodeName"):
                self.scheduled[gang].add(name)
                if len(self.scheduled[gang]) >= self.base_pods:
                    for scaled, scaled_uid in sorted(self.waiting.pop(gang, {}).items()):
                        self.release(scaled, scaled_uid)
        elif pod_gated(pod):
            if len(self.scheduled[base_gang]) >= self.base_pods:
                self.release(name, uid)
            else:
                self.waiting[base_gang][name] = uid

    def run(self) -> None:
        def on_event(kind: str, pod: JSON, _relisted: bool) -> None:
            if kind in ("ADDED", "MODIFIED"):
                self.on_pod(pod)

        def synced(_items: object) -> None:
            print("floor: watching", flush=True)

        ListWatch(self.kube, PODS, self.namespace, on_event, label_selector=names.managed_selector(),
                  on_synced=synced, watch_timeout_seconds=3600).run()


def start(kubeconfig: Path, namespace: str, base_pods: int, log: Path) -> subprocess.Popen[bytes]:
    """This script as its own process, once its watch is up (its output goes to `log`)."""
    return procs.start_module("bench.floor", ["--kubeconfig", str(kubeconfig), "--namespace", namespace,
                                              "--base-pods", str(base_pods)], log, b"floor: watching",
                              "the floor script")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--base-pods", type=int, required=True, help="pods in each base gang")
    args = parser.parse_args()
    from activities.kubeapi import api_client

    Floor(Kube(api_client(args.kubeconfig)), args.namespace, args.base_pods).run()


if __name__ == "__main__":
    main()
