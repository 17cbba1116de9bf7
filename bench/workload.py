"""The PodCliqueSets the benchmarks create, and the cluster-side moves they make (what a kubelet would report)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from activities.kubeapi import JSON, PODCLIQUESETS, PODS, Kube
from bench import interrupt
from bench.observer import Observer, Tracked
from grove import names
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL


def clique(name: str, replicas: int, min_available: int | None = None) -> JSON:
    return {
        "name": name,
        "spec": {
            "roleName": name,
            "replicas": replicas,
            "minAvailable": replicas if min_available is None else min_available,
            "podSpec": {"containers": [{"name": name, "image": "registry.k8s.io/pause:3.10",
                                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]},
        },
    }


def pcs_manifest(name: str, namespace: str, *, replicas: int, cliques: list[JSON],
                 scaling_groups: list[JSON] | None = None, termination_delay: str | None = None) -> JSON:
    template: JSON = {"cliques": cliques}
    if scaling_groups:
        template["podCliqueScalingGroups"] = scaling_groups
    if termination_delay:
        template["terminationDelay"] = termination_delay
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "template": template}}


def release_shape(name: str, namespace: str) -> JSON:
    """B1: a base gang of 4 pods (a router and PCSG replica 0) and two scaled gangs of 3 pods each."""
    return pcs_manifest(name, namespace, replicas=1, cliques=[clique("router", 1), clique("leader", 1),
                                                              clique("worker", 2)],
                        scaling_groups=[{"name": "prefill", "replicas": 3, "minAvailable": 1,
                                         "cliqueNames": ["leader", "worker"]}])


SMALL_CLIQUE = "app"  # the one clique of small_shape


def small_pod(pcs: str, replica: int) -> str:
    """The one pod of a small_shape replica."""
    return names.pod_name(names.pclq_name(pcs, replica, SMALL_CLIQUE), 0)


def small_shape(name: str, namespace: str, replicas: int, termination_delay: str | None = None) -> JSON:
    """B2-B5: one clique of one pod per replica."""
    return pcs_manifest(name, namespace, replicas=replicas, cliques=[clique(SMALL_CLIQUE, 1)],
                        termination_delay=termination_delay)


def create(kube: Kube, manifest: JSON) -> JSON:
    return kube.create(PODCLIQUESETS, manifest["metadata"]["namespace"], manifest)


def fail_readiness(kube: Kube, namespace: str, pod: str, failing: bool = True) -> None:
    """Make the pod's readiness probe fail (or pass again): KWOK, playing the kubelet, reports it NotReady (Ready)."""
    value = FAKE_READINESS_FAIL if failing else None
    kube.patch(PODS, namespace, pod, {"metadata": {"annotations": {FAKE_READINESS_ANNOTATION: value}}})


def settled_pclqs(observer: Observer, namespace: str) -> list[Tracked]:
    """The live PodCliques whose mirrored status says every pod is Ready and nothing is breached."""
    return [t for t in observer.select("PodClique", namespace)
            if not t.state.get("deleting") and t.gone_at is None and t.state.get("ready_replicas")
            and t.state.get("breached") == "False"]


def wait_settled(observer: Observer, namespace: str, pclqs: int, timeout: float) -> float:
    """Until `pclqs` PodCliques are mirrored Ready and unbreached: every replica workflow saw its pods Ready."""
    return observer.wait(lambda: len(settled_pclqs(observer, namespace)) >= pclqs, timeout,
                         f"{pclqs} PodCliques mirrored Ready")


def live_pods(observer: Observer, namespace: str, **labels: str) -> list[Tracked]:
    return [t for t in observer.select("Pod", namespace, **labels)
            if t.gone_at is None and not t.state.get("deleting")]


def all_released(pods: Iterable[Tracked]) -> bool:
    return all(not t.state.get("gated") for t in pods)


def sleep_until(deadline: float) -> None:
    """time.sleep up to a wall-clock moment (no-op once past); a stop ends it (bench/interrupt.py)."""
    remaining = deadline - time.time()
    if remaining > 0:
        interrupt.pause(remaining)


def pcs_uid(kube: Kube, namespace: str, name: str) -> str:
    obj: Any = kube.get(PODCLIQUESETS, namespace, name)
    assert obj is not None, f"PodCliqueSet {namespace}/{name} not found"
    return str(obj["metadata"]["uid"])
