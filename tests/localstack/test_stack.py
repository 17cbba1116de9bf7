"""The local stack is real: kube-scheduler honours scheduling gates, KWOK plays kubelet, the garbage collector and
pod GC of kube-controller-manager run, and the Temporal dev server keeps a timer across a worker restart."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kubernetes.client import CoordinationV1Api, CoreV1Api, V1Pod
from kubernetes.client.exceptions import ApiException
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from localstack.kwok import MANAGED_NODE_LABEL
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from tests.localstack.stack_proof_workflows import SignalThenTimerWorkflow

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack

GATE = "grove.io/podgang-pending-creation"


def pod_manifest(
    name: str,
    *,
    gates: tuple[str, ...] = (),
    owner: dict[str, Any] | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if owner:
        metadata["ownerReferences"] = [owner]
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
        "schedulingGates": [{"name": g} for g in gates],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def condition(pod: V1Pod, kind: str) -> tuple[str | None, str | None]:
    for c in (pod.status.conditions if pod.status else None) or []:
        if c.type == kind:
            return c.status, c.reason
    return None, None


def is_running_and_ready(pod: V1Pod) -> bool:
    statuses = (pod.status.container_statuses if pod.status else None) or []
    return (
        pod.status is not None
        and pod.status.phase == "Running"
        and condition(pod, "Ready")[0] == "True"
        and condition(pod, "ContainersReady")[0] == "True"
        and bool(statuses)
        and all(s.ready for s in statuses)
    )


def wait_for(check: Callable[[], bool], what: str, timeout: float = 30.0) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)
    return time.monotonic() - started


def pod_gone(core: CoreV1Api, name: str, namespace: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as error:
        if error.status == 404:
            return True
        raise
    return False


def running_pod(core: CoreV1Api, namespace: str, **manifest: Any) -> V1Pod:
    name = f"p-{uuid.uuid4().hex[:8]}"
    core.create_namespaced_pod(namespace, pod_manifest(name, **manifest))
    wait_for(
        lambda: is_running_and_ready(core.read_namespaced_pod(name, namespace)), f"pod {name} Running+Ready"
    )
    return core.read_namespaced_pod(name, namespace)


def test_gated_pod_waits_then_is_scheduled_onto_a_kwok_node_and_becomes_ready(
    kube: ApiClient, namespace: str
) -> None:
    core = CoreV1Api(kube)
    core.create_namespaced_pod(namespace, pod_manifest("gated", gates=(GATE,)))

    # The scheduler reports the gate (PodScheduled=False/SchedulingGated) and must keep the pod unbound.
    wait_for(
        lambda: (
            condition(core.read_namespaced_pod("gated", namespace), "PodScheduled")[1] == "SchedulingGated"
        ),
        "PodScheduled reason SchedulingGated",
    )
    for _ in range(30):
        pod = core.read_namespaced_pod("gated", namespace)
        assert pod.spec.node_name is None, "a gated pod was bound"
        assert condition(pod, "PodScheduled") == ("False", "SchedulingGated")
        assert pod.status.phase == "Pending"
        time.sleep(0.1)

    # A JSON patch (a list body); the client would send a dict as a strategic merge patch, where `[]` removes nothing.
    core.patch_namespaced_pod("gated", namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])

    wait_for(
        lambda: is_running_and_ready(core.read_namespaced_pod("gated", namespace)), "pod Running and Ready"
    )
    pod = core.read_namespaced_pod("gated", namespace)
    assert condition(pod, "PodScheduled")[0] == "True"
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels.get(MANAGED_NODE_LABEL) == "true", (
        f"bound to {pod.spec.node_name}, not a KWOK node"
    )
    assert pod.status.pod_ip, "KWOK gives running pods an IP"


def test_deleting_the_owner_garbage_collects_the_pod(kube: ApiClient, namespace: str) -> None:
    core = CoreV1Api(kube)
    owner = core.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}, "data": {"k": "v"}})
    owner_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    pod = running_pod(core, namespace, owner=owner_ref)
    assert not pod_gone(core, pod.metadata.name, namespace)

    core.delete_namespaced_config_map("owner", namespace)

    # The garbage collector deletes the dependent (gracefully, it is bound), KWOK then plays kubelet and removes it.
    wait_for(lambda: pod_gone(core, pod.metadata.name, namespace), "the owned pod to be garbage-collected")


def test_fake_readiness_annotation_makes_a_pod_not_ready_and_back(kube: ApiClient, namespace: str) -> None:
    core = CoreV1Api(kube)
    name = running_pod(core, namespace).metadata.name

    core.patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": {FAKE_READINESS_ANNOTATION: FAKE_READINESS_FAIL}}}
    )

    def not_ready_but_running() -> bool:
        pod = core.read_namespaced_pod(name, namespace)
        return (
            pod.status.phase == "Running"
            and condition(pod, "Ready")[0] == "False"
            and condition(pod, "ContainersReady")[0] == "False"
            and not any(s.ready for s in pod.status.container_statuses)
        )

    wait_for(not_ready_but_running, "Ready=False while Running")
    time.sleep(1)  # and it stays so: nothing flips it back while the annotation is there
    assert not_ready_but_running()

    core.patch_namespaced_pod(
        name, namespace, {"metadata": {"annotations": {FAKE_READINESS_ANNOTATION: None}}}
    )
    wait_for(lambda: is_running_and_ready(core.read_namespaced_pod(name, namespace)), "Ready again")


def test_kwok_nodes_heartbeat_through_their_leases(kube: ApiClient) -> None:
    """Without lease renewals kube-controller-manager marks every node Unknown after 50 s (and its pods NotReady)."""
    core, coordination = CoreV1Api(kube), CoordinationV1Api(kube)
    nodes = [n for n in core.list_node().items if n.metadata.labels.get(MANAGED_NODE_LABEL) == "true"]
    assert nodes
    first = {
        n.metadata.name: coordination.read_namespaced_lease(n.metadata.name, "kube-node-lease") for n in nodes
    }

    def all_renewed() -> bool:
        return all(
            coordination.read_namespaced_lease(name, "kube-node-lease").spec.renew_time
            > lease.spec.renew_time
            for name, lease in first.items()
        )

    wait_for(all_renewed, "every node lease to be renewed", timeout=30)
    assert all(condition_of_node(core, name) == "True" for name in first)


def condition_of_node(core: CoreV1Api, name: str) -> str | None:
    for c in core.read_node(name).status.conditions or []:
        if c.type == "Ready":
            return str(c.status)
    return None


def test_losing_a_node_removes_its_pods(stack: LocalStack, kube: ApiClient, namespace: str) -> None:
    core = CoreV1Api(kube)
    (node_name,) = stack.add_nodes(1, labels={"grove-temporal.io/test-node": namespace})
    on_lost_node = running_pod(core, namespace, node_selector={"grove-temporal.io/test-node": namespace})
    elsewhere = running_pod(core, namespace, node_selector={"kubernetes.io/hostname": "kwok-node-0"})
    assert on_lost_node.spec.node_name == node_name
    assert elsewhere.spec.node_name != node_name

    stack.lose_node(node_name)

    # Pod GC force-deletes pods of a vanished node after a 40 s quarantine, checking every 20 s.
    wait_for(lambda: pod_gone(core, on_lost_node.metadata.name, namespace), "pod of the lost node to go", 120)
    assert is_running_and_ready(core.read_namespaced_pod(elsewhere.metadata.name, namespace))


async def test_durable_timer_survives_a_worker_restart(temporal_client: Client) -> None:
    task_queue = f"stack-proof-{uuid.uuid4().hex[:8]}"
    timer_seconds = 3.0
    async with Worker(temporal_client, task_queue=task_queue, workflows=[SignalThenTimerWorkflow]):
        handle = await temporal_client.start_workflow(
            SignalThenTimerWorkflow.run,
            timer_seconds,
            id=f"stack-proof-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        await handle.signal(SignalThenTimerWorkflow.proceed)
        for _ in range(100):
            if await handle.query(SignalThenTimerWorkflow.phase) == "timer-running":
                break
            await asyncio.sleep(0.1)
        assert await handle.query(SignalThenTimerWorkflow.phase) == "timer-running"
    # The first worker is gone mid-timer. The timer fires on the server while nobody polls; the workflow waits.
    await asyncio.sleep(timer_seconds + 1)
    assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING

    async with Worker(temporal_client, task_queue=task_queue, workflows=[SignalThenTimerWorkflow]):
        result = await asyncio.wait_for(handle.result(), timeout=60)

    assert result == "done after 1 signal(s)"
    events = [e.event_type for e in (await handle.fetch_history()).events]
    assert events.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED) == 1
    assert events.count(EventType.EVENT_TYPE_TIMER_STARTED) == 1
    assert events.count(EventType.EVENT_TYPE_TIMER_FIRED) == 1
