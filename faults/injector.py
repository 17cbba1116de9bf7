"""Carries out the steps of a round against the real components: the worker process, the Temporal dev server,
kube-apiserver, KWOK nodes, and pods' readiness as a kubelet would report it.

Every fault ends with the component back up, so a round's quiet period starts with everything running.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from activities.kubeapi import PODCLIQUES, PODCLIQUESETS, PODS, SCALINGGROUPS, Kube, KubeError, Resource
from faults import schedule
from faults.partition import Partitions
from faults.schedule import Step
from grove.names import KIND_PODCLIQUESCALINGGROUP
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from localstack.processes import ManagedProcess
from localstack.stack import LocalStack

NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
PROTECTED_NODE = "kwok-node-0"  # foreign pods live here; never lost
NODE_READY_TIMEOUT = 120.0  # a replacement node's wait to be Ready: past the longest kube-apiserver outage (30 s) and KWOK's reconnect
RUNNER_FIELD_MANAGER = "grove-temporal-faults"
ROLLOUT_ENV = "ROLLOUT_GENERATION"  # the env var a template change sets  # our own writes, told apart from the product's ("grove-temporal")


def worker_argv(kubeconfig: Path, temporal_address: str, namespace: str, task_queue: str,
                clock_skew_seconds: float = 0.0) -> list[str]:
    launcher = ["-m", "faults.skewed_worker", str(clock_skew_seconds)] if clock_skew_seconds else ["-m", "worker.cli"]
    return [sys.executable, *launcher, "worker", "--kubeconfig", str(kubeconfig),
            "--temporal-address", temporal_address, "--namespace", namespace, "--task-queue", task_queue,
            "--log-level", "INFO"]


@dataclass
class Injector:
    stack: LocalStack
    kube: Kube
    namespace: str
    workers: list[ManagedProcess]  # every worker process on the task queue
    pending_deadline: Callable[[str], Awaitable[bool]]  # pod name -> does its replica show a pending deadline?
    log: Callable[[str], None]
    faults: Counter[str] = field(default_factory=Counter)
    worker_kills: Counter[str] = field(default_factory=Counter)  # by worker process name
    readiness: Counter[str] = field(default_factory=Counter)
    scales: Counter[str] = field(default_factory=Counter)
    outages: list[dict[str, float | bool | str]] = field(default_factory=list)
    lost_nodes: list[str] = field(default_factory=list)
    template_changes: list[dict[str, str | float]] = field(default_factory=list)
    partitions: Partitions | None = None  # when partition kinds are on
    partitioned: list[dict[str, str | float]] = field(default_factory=list)
    # Pods a kube-apiserver outage broke (not the planner: its seeded plan must not depend on what ran). The quiet
    # period heals them where a rolling update masks or waits on their PodClique, as it does the planner's.
    outage_broken: dict[str, str] = field(default_factory=dict)  # pod name -> the UID broken
    # Every step as it began (wall-clock seconds, what): lets the results name the faults around a slow deletion.
    timeline: list[tuple[float, str]] = field(default_factory=list)

    async def run(self, steps: list[Step], started: float) -> None:
        for step in steps:
            delay = started + step.at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self.do(step)

    async def do(self, step: Step) -> None:
        self.log(f"    {step.describe()}")
        self.timeline.append((time.time(), step.describe()))
        if step.action in (schedule.BREAK, schedule.HEAL):
            assert step.pod is not None
            await asyncio.to_thread(self.set_readiness, step.pod, step.action == schedule.BREAK)
            return
        if step.action == schedule.SCALE:
            await self.scale(step)
            return
        if step.action == schedule.TEMPLATE_CHANGE:
            await self.template_change(step)
            return
        self.faults[step.action] += 1
        if step.action == schedule.WORKER_KILL:
            worker = self.workers[step.worker]
            self.worker_kills[worker.name] += 1
            await asyncio.to_thread(worker.kill)
            await asyncio.sleep(step.seconds)
            await asyncio.to_thread(worker.start)
        elif step.action == schedule.TEMPORAL_RESTART:
            await asyncio.to_thread(self.stack.stop_component, "temporal")
            await asyncio.sleep(step.seconds)
            await asyncio.to_thread(self.stack.start_component, "temporal")
        elif step.action == schedule.ETCD_RESTART:
            # kube-apiserver stays up and answers reads from its watch cache, fails writes and quorum reads, and
            # reconnects when etcd is back; a watch may end with "too old resource version" and must relist.
            await asyncio.to_thread(self.stack.stop_component, "etcd")
            await asyncio.sleep(step.seconds)
            await asyncio.to_thread(self.stack.start_component, "etcd")
        elif step.action in schedule.PARTITIONS:
            await self.partition(step)
        elif step.action == schedule.APISERVER_OUTAGE:
            await self.apiserver_outage(step)
        elif step.action == schedule.NODE_LOSS:
            await asyncio.to_thread(self.node_loss, step.pick)

    async def partition(self, step: Step) -> None:
        """Drop one worker's packets to kube-apiserver or Temporal for `step.seconds`; everything else stays up."""
        assert self.partitions is not None, "partitions were not prepared for this run"
        worker = self.workers[step.worker]
        if step.action == schedule.PARTITION_APISERVER:
            assert self.stack.apiserver is not None
            port = self.stack.apiserver.port
        else:
            port = int(self.stack.temporal_address.rsplit(":", 1)[1])
        await asyncio.to_thread(self.partitions.drop, worker.name, port)
        try:
            await asyncio.sleep(step.seconds)
        finally:
            await asyncio.to_thread(self.partitions.heal, worker.name, port)
        self.partitioned.append({"worker": worker.name, "from": step.action.removeprefix("partition-"),
                                 "seconds": round(step.seconds, 1)})

    async def scale(self, step: Step) -> None:
        """Write the scale subresource as an HPA does, retried through kube-apiserver outages (up to 90 s): the
        count back to the template's must land, or the settled check would compare with the wrong plan. A target
        that is not there (deleted by a gang termination) is skipped: it comes back with the template's count."""
        assert step.target is not None
        kind, name = step.target
        resource = SCALINGGROUPS if kind == KIND_PODCLIQUESCALINGGROUP else PODCLIQUES
        deadline = time.monotonic() + 90
        while True:
            try:
                await asyncio.to_thread(self.kube.patch, resource, self.namespace, name,
                                        {"spec": {"replicas": step.replicas}}, subresource="scale")
                self.scales[kind] += 1
                return
            except KubeError as exc:
                if exc.not_found:
                    self.scales["skipped (target not there)"] += 1
                    return
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(1.0)

    async def template_change(self, step: Step) -> None:
        """Edit the PCS template as a user would: a new image tag (KWOK runs any image) or a new value of the env var
        ROLLOUT_GENERATION, in every clique. Read-modify-write with the resourceVersion, retried through conflicts
        and kube-apiserver outages (up to 90 s): the change must land, its rollout is checked to complete."""
        assert step.pcs is not None
        number = len(self.template_changes) + 1
        deadline = time.monotonic() + 90
        while True:
            try:
                pcs = await asyncio.to_thread(self.kube.get, PODCLIQUESETS, self.namespace, step.pcs)
                assert pcs is not None, f"PodCliqueSet {step.pcs} is gone"
                for clique in pcs["spec"]["template"]["cliques"]:
                    container = clique["spec"]["podSpec"]["containers"][0]
                    if step.change == schedule.CHANGE_IMAGE:
                        container["image"] = f"{container['image'].split(':')[0]}:3.10-r{number}"
                    else:
                        env = [e for e in container.get("env") or [] if e.get("name") != ROLLOUT_ENV]
                        container["env"] = [*env, {"name": ROLLOUT_ENV, "value": str(number)}]
                await asyncio.to_thread(self.kube.replace, PODCLIQUESETS, self.namespace, step.pcs, pcs)
                self.template_changes.append({"pcs": step.pcs, "change": step.change, "number": number,
                                              "at": time.time()})
                return
            except KubeError as exc:
                if time.monotonic() > deadline:
                    raise
                if not exc.conflict:
                    await asyncio.sleep(1.0)

    def set_readiness(self, pod: str, failing: bool, uid: str | None = None) -> bool:
        """Break or heal the pod by that name; with `uid`, only that incarnation (a pod picked for being Ready may
        have been replaced by then: a rolling update recreates it under the same name). True if patched."""
        value = FAKE_READINESS_FAIL if failing else None
        meta: dict[str, object] = {"annotations": {FAKE_READINESS_ANNOTATION: value}}
        if uid is not None:
            meta["uid"] = uid  # a precondition: refused (422, metadata.uid) if the name is another pod's now
        try:
            CoreV1Api(self.kube.api_client).patch_namespaced_pod(pod, self.namespace, {"metadata": meta},
                                                                 field_manager=RUNNER_FIELD_MANAGER)
            self.readiness["break" if failing else "heal"] += 1
            return True
        except ApiException as exc:
            if exc.status == 404:
                self.readiness["skipped (pod not there)"] += 1
            elif exc.status in (409, 422) and uid is not None and "metadata.uid" in str(exc.body):
                self.readiness["skipped (pod replaced)"] += 1
            else:
                raise
            return False

    async def apiserver_outage(self, step: Step) -> None:
        """Break a Ready pod of a long-delay replica, wait until its workflow shows the deadline, then stop
        kube-apiserver with the deadline pending (it may expire during the outage)."""
        pod, uid = await asyncio.to_thread(self._first_ready, step.candidates)
        if await asyncio.to_thread(self.set_readiness, pod, True, uid) and uid is not None:
            self.outage_broken[pod] = uid
        pending = False
        waited = time.monotonic()
        while time.monotonic() - waited < 8 and not pending:
            pending = await self.pending_deadline(pod)
            if not pending:
                await asyncio.sleep(0.3)
        began = time.monotonic()
        await asyncio.to_thread(self.stack.stop_component, "kube-apiserver")
        await asyncio.sleep(step.seconds)
        await asyncio.to_thread(self.stack.start_component, "kube-apiserver")
        self.outages.append({"pod": pod, "deadline_pending": pending,
                             "down_seconds": round(time.monotonic() - began, 1)})

    def _first_ready(self, candidates: tuple[str, ...]) -> tuple[str, str | None]:
        """The first candidate that is Ready on a node KWOK still runs (a lost node's pods cannot change), and its
        UID (None for the fallback, the first candidate whatever its state)."""
        nodes = {n["metadata"]["name"] for n in self.kube.list_items(NODES)} - set(self.lost_nodes)
        pods = {p["metadata"]["name"]: p for p in self.kube.list_items(PODS, self.namespace)}
        for name in candidates:
            pod = pods.get(name)
            if (pod is not None and pod["spec"].get("nodeName") in nodes and not pod["metadata"].get("deletionTimestamp")
                    and any(c.get("type") == "Ready" and c.get("status") == "True"
                            for c in (pod.get("status") or {}).get("conditions") or [])):
                return name, str(pod["metadata"]["uid"])
        return candidates[0], None

    def node_loss(self, pick: float) -> None:
        nodes = sorted(n["metadata"]["name"] for n in self.kube.list_items(NODES))
        pods = self.kube.list_items(PODS, self.namespace)
        busy = sorted({p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")} & set(nodes))
        candidates = [n for n in busy if n != PROTECTED_NODE] or [n for n in nodes if n != PROTECTED_NODE]
        node = candidates[min(int(pick * len(candidates)), len(candidates) - 1)]
        self.stack.lose_node(node)
        self.lost_nodes.append(node)
        # The replacement may be created while kube-apiserver is down for another fault of the round (seed 17,
        # round 39: a 20.7 s outage from 3.9 s, the node lost at 8.8 s, KWOK had not reported it Ready 30 s later
        # and the run ended). It becomes Ready once the outage is over; the run waits as long as an outage lasts.
        added = self.stack.add_nodes(1, ready_timeout=NODE_READY_TIMEOUT)
        self.log(f"      lost {node}, added {', '.join(added)}")
