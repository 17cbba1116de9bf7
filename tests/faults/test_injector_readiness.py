"""The fault runner breaks a pod's readiness by name; a kube-apiserver outage breaks the Ready pod it picked, and only
that incarnation. Seed 12, round 13 (2026-11-26): the pod picked was replaced by a rolling update under the same name
a moment earlier, the break landed on the new pod, and nothing healed it (the rollout masked its PodClique): a stall
of the test bed, not of the product. Against the real apiserver."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from activities.kubeapi import PODS, Kube
from faults.injector import Injector
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulingGates": [{"name": "hold"}],  # never scheduled: deleted at once
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def _annotations(client: Kube, namespace: str, name: str) -> dict[str, str]:
    found = client.get(PODS, namespace, name)
    assert found is not None
    return dict(found["metadata"].get("annotations") or {})


def test_a_break_meant_for_a_replaced_incarnation_leaves_the_new_pod_alone(
        stack: LocalStack, kube: ApiClient, namespace: str) -> None:
    client = Kube(kube)
    injector = Injector(stack=stack, kube=client, namespace=namespace, workers=[],
                        pending_deadline=lambda _pod: None, log=lambda _line: None)  # type: ignore[arg-type,return-value]
    old_uid = client.create(PODS, namespace, _pod("api-0"))["metadata"]["uid"]
    client.delete(PODS, namespace, "api-0")
    deadline = time.monotonic() + 30
    while client.get(PODS, namespace, "api-0") is not None:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    new_uid = client.create(PODS, namespace, _pod("api-0"))["metadata"]["uid"]

    assert not injector.set_readiness("api-0", True, old_uid)
    assert FAKE_READINESS_ANNOTATION not in _annotations(client, namespace, "api-0")
    assert injector.readiness["skipped (pod replaced)"] == 1

    assert injector.set_readiness("api-0", True, new_uid)
    assert _annotations(client, namespace, "api-0")[FAKE_READINESS_ANNOTATION] == FAKE_READINESS_FAIL
    assert injector.set_readiness("api-0", False)  # a heal by name, as the planner's
    assert FAKE_READINESS_ANNOTATION not in _annotations(client, namespace, "api-0")
