"""The local stack gang-schedules for real: kube-apiserver serves scheduling.k8s.io/v1alpha2 PodGroups and
kube-scheduler runs GangScheduling, so a gang PodGroup's pods bind all together or not at all (KEP-4671).

No grove-temporal code is involved: a plain PodGroup and plain pods, on nodes of the test's own."""

from __future__ import annotations

import ssl
import time
import urllib.request
from typing import TYPE_CHECKING, Any

from kubernetes.client import CoreV1Api

from activities.kubeapi import NATIVE_PODGROUPS, PODS, Kube
from localstack.kwok import NodeShape

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack

NODE = NodeShape(cpu="10", memory="64Gi", pods=110, gpus=0)  # room for five 2-CPU pods


def gang_pod(name: str, podgroup: str, node_label: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulingGroup": {"podGroupName": podgroup},
            "nodeSelector": node_label,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
        },
    }


def bound(kube: Kube, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in kube.list_items(PODS, namespace)
            if (p.get("spec") or {}).get("nodeName")}


def test_the_stack_serves_the_podgroup_api(kube: ApiClient) -> None:
    assert "podgroups" in Kube(kube).api_resources("scheduling.k8s.io/v1alpha2")


def test_a_gang_binds_no_pod_until_all_fit_then_all_together(stack: LocalStack, kube: ApiClient,
                                                              namespace: str) -> None:
    client = Kube(kube)
    label = {"grove-temporal.io/test-node": namespace}
    first = stack.add_nodes(1, NODE, labels=label)
    added: list[str] = []
    try:
        client.create(NATIVE_PODGROUPS, namespace, {
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "six"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 6}}},
        })
        created = client.create(PODS, namespace, gang_pod("member-0", "six", label))
        assert created["spec"]["schedulingGroup"] == {"podGroupName": "six"}, "the apiserver kept the field"
        for i in range(1, 6):
            client.create(PODS, namespace, gang_pod(f"member-{i}", "six", label))

        # Five of six fit on the node: a pod-by-pod scheduler would bind five. The gang binds none.
        until = time.monotonic() + 30
        while time.monotonic() < until:
            assert bound(client, namespace) == {}, "a gang member was bound while the gang could not fit"
            time.sleep(0.5)
        pods = client.list_items(PODS, namespace)
        reasons = {c.get("reason") for p in pods for c in (p.get("status") or {}).get("conditions") or []
                   if c.get("type") == "PodScheduled"}
        assert reasons == {"Unschedulable"}, reasons

        added = stack.add_nodes(1, NODE, labels=label)
        seen: dict[str, float] = {}
        deadline = time.monotonic() + 60
        while len(seen) < 6 and time.monotonic() < deadline:
            for name in bound(client, namespace):
                seen.setdefault(name, time.monotonic())
            time.sleep(0.05)
        assert len(seen) == 6, f"only {sorted(seen)} bound"
        spread = max(seen.values()) - min(seen.values())
        assert spread < 2.0, f"the gang's pods bound {spread:.2f}s apart"
        nodes = bound(client, namespace)
        assert set(nodes.values()) == {*first, *added}  # five cannot share one node: both nodes are used
    finally:
        for node in (*first, *added):
            CoreV1Api(kube).delete_node(node)


def _unschedulable_attempts(stack: LocalStack, kube: ApiClient) -> float:
    """kube-scheduler's count of scheduling attempts that ended unschedulable, from its /metrics."""
    token = kube.configuration.api_key["BearerToken"].removeprefix("Bearer ").strip()
    port = stack.components["kube-scheduler"].port  # type: ignore[attr-defined]
    request = urllib.request.Request(f"https://127.0.0.1:{port}/metrics",
                                     headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=5, context=ssl._create_unverified_context()) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("scheduler_schedule_attempts_total{") and 'result="unschedulable"' in line)


def test_a_gang_that_cannot_fit_is_not_retried_in_a_busy_loop(stack: LocalStack, kube: ApiClient,
                                                              namespace: str) -> None:
    # One member fits, the other never does. With kube-scheduler's SchedulerPopFromBackoffQ on, the rejected gang
    # was popped from the backoff queue at once, over and over: thousands of attempts a second, half a core for as
    # long as the gang stayed pending (localstack/kube.py). With it off the pods wait out their backoff.
    client = Kube(kube)
    label = {"grove-temporal.io/test-node": namespace}
    nodes = stack.add_nodes(1, NODE, labels=label)
    try:
        client.create(NATIVE_PODGROUPS, namespace, {
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup", "metadata": {"name": "stuck"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        })
        client.create(PODS, namespace, gang_pod("fits", "stuck", label))
        too_big = gang_pod("too-big", "stuck", label)
        too_big["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1000"
        client.create(PODS, namespace, too_big)
        time.sleep(3)  # the first attempts and their backoff
        before = _unschedulable_attempts(stack, kube)
        time.sleep(10)
        attempts = _unschedulable_attempts(stack, kube) - before
        # Backoff doubles from 1 s up to 10 s: a handful of attempts per pod in 10 s. The busy loop made thousands.
        assert attempts < 100, f"{attempts:.0f} unschedulable attempts in 10 s: the gang is retried in a busy loop"
        assert bound(client, namespace) == {}
    finally:
        for node in nodes:
            CoreV1Api(kube).delete_node(node)
