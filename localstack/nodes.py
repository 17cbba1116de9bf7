"""Fake nodes: what the stack creates for KWOK to run, and how a node is lost."""

from __future__ import annotations

import time

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localstack.kwok import MANAGED_NODE_LABEL, NodeShape
from localstack.processes import StackStartError


def node_ip(index: int) -> str:
    """A distinct, never-routed InternalIP per fake node (pods report it as hostIP)."""
    return f"10.250.{index // 250}.{index % 250 + 1}"


def node_object(
    name: str, index: int, shape: NodeShape, labels: dict[str, str] | None = None
) -> client.V1Node:
    capacity = shape.capacity()
    addresses = [
        client.V1NodeAddress(type="InternalIP", address=node_ip(index)),
        client.V1NodeAddress(type="Hostname", address=name),
    ]
    return client.V1Node(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={
                MANAGED_NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                **(labels or {}),
            },
        ),
        # Status given at creation is kept for nodes: the scheduler sees this capacity from the first moment.
        status=client.V1NodeStatus(capacity=capacity, allocatable=capacity, addresses=addresses),
    )


def create_nodes(
    core: client.CoreV1Api, names: dict[str, int], shape: NodeShape, labels: dict[str, str] | None = None
) -> None:
    """Create nodes given as name -> index (the index picks the node's IP)."""
    for name, index in names.items():
        try:
            core.create_node(node_object(name, index, shape, labels))
        except ApiException as error:
            if error.status != 409:
                raise


def node_ready(node: client.V1Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    return any(c.type == "Ready" and c.status == "True" for c in conditions)


def wait_nodes_ready(core: client.CoreV1Api, names: list[str], timeout: float = 30.0) -> float:
    started = time.monotonic()
    pending = set(names)
    while pending:
        for name in list(pending):
            try:
                if node_ready(core.read_node(name)):
                    pending.discard(name)
            except ApiException as error:
                if error.status != 404:
                    raise
        if not pending:
            break
        if time.monotonic() - started > timeout:
            raise StackStartError(f"nodes not Ready after {timeout:.0f}s: {', '.join(sorted(pending))}")
        time.sleep(0.1)
    return time.monotonic() - started


def lose_node(core: client.CoreV1Api, name: str) -> None:
    """Lose a node the way a cloud cluster does when a machine dies.

    First its kubelet goes silent (KWOK stops managing it: no lease renewals, no pod status, pods on it are never
    finalized), then the cloud provider's node lifecycle deletes the Node object. From there kube-controller-manager's
    pod garbage collector force-deletes the pods bound to the missing node — after its fixed 40 s quarantine and on
    its 20 s cycle, so pods go away 40–60 s after the node (see docs/operations.md, "Losing a node").
    """
    try:
        core.patch_node(name, {"metadata": {"labels": {MANAGED_NODE_LABEL: None}}})
        core.delete_node(name)
    except ApiException as error:
        if error.status != 404:
            raise
