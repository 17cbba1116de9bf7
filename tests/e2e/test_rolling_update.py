"""Rolling updates on the real stack (DESIGN §4.9), asserted from a watch of the real pods and PodCliques.

The PCS has 3 replicas, a standalone clique with minAvailable = replicas (so recreating one of its pods breaches it
unless the update marks it UpdateInProgress) and a PCSG, and terminationDelay 1s: a breach caused by update churn
would gang-terminate within a second.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from activities.kubeapi import PODS as PODS_RESOURCE
from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, WorkerProcess, clique, pcs_manifest, wait_for
from tests.e2e.rollout_watch import RolloutWatch, Shape
from workflows.contract import rollout_workflow_id
from workflows.rollout_messages import RolloutStatus

REPLICAS = 3
SHAPE = Shape(standalone={"frontend": 2}, group_cliques={"worker": 1}, group="sg", group_replicas=2, group_min=1)
PODS = REPLICAS * (2 + 2 * 2)
OLD, NEW, NEWER = "registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.11", "registry.k8s.io/pause:3.12"


def manifest(namespace: str, name: str, *, delay: str | None = "1s", **extra: Any) -> dict[str, Any]:
    body = pcs_manifest(name, namespace, replicas=REPLICAS, termination_delay=delay,
                        cliques=[clique("frontend", 2, 2), clique("worker", 2, 1)],
                        scaling_groups=[{"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["worker"]}])
    body["spec"].update(extra)
    return body


def cli(*args: str, address: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address}
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def set_image(cluster: Cluster, name: str, image: str) -> None:
    pcs = cluster.pcs(name)
    assert pcs is not None
    cliques = pcs["spec"]["template"]["cliques"]
    for c in cliques:
        c["spec"]["podSpec"]["containers"][0]["image"] = image
    cluster.patch_pcs(name, {"spec": {"template": {"cliques": cliques}}})


@pytest.fixture
def watch_factory(cluster: Cluster) -> Iterator[Any]:
    started: list[RolloutWatch] = []

    def make(name: str) -> RolloutWatch:
        watch = RolloutWatch(cluster.kube, cluster.namespace, name, REPLICAS, SHAPE).start()
        started.append(watch)
        return watch

    yield make
    for watch in started:
        watch.stop()


async def rollout_status(client: Client, cluster: Cluster, name: str) -> RolloutStatus:
    pcs = cluster.pcs(name)
    assert pcs is not None
    handle = client.get_workflow_handle(rollout_workflow_id(cluster.namespace, name, pcs["metadata"]["uid"]))
    return await handle.query("status", result_type=RolloutStatus)


def all_at(watch: RolloutWatch, image: str) -> bool:
    live = watch.live()
    return len(live) == PODS and all(p.image == image and p.ready for p in live)


def assert_rollout(watch: RolloutWatch, cluster: Cluster, since: float, image: str, *, changes: int = 1) -> None:
    samples = watch.unavailable_since(since)
    worst = max((len(d) for _, d in samples), default=0)
    print(f"\nrollout: {len(samples)} pod/PCLQ events watched, at most {worst} replica(s) unavailable at once; "
          f"UpdateInProgress seen on {len(watch.update_in_progress)} PodCliques")
    assert worst <= 1, [s for s in samples if len(s[1]) > 1][:5]
    recreated = watch.recreated()
    assert len(recreated) == PODS
    assert all(n == changes for n in recreated.values()), recreated
    assert all(p.image == image for p in watch.live())
    assert cluster.events("GangTerminated") == []


def test_a_new_pcs_shows_its_replicas_updated_as_soon_as_they_are_available(
        cluster: Cluster, worker_process: WorkerProcess) -> None:
    """`updatedReplicas` is the rollout workflow's to write, and it re-reads a PCS whose replicas are not yet updated
    only every 30 s: without the leader's wake (worker/pcs_status.py) a new PCS showed UP-TO-DATE 0 for 20 s or more
    after every replica was available."""
    cluster.apply(manifest(cluster.namespace, "fresh"))

    def status() -> dict[str, Any]:
        return (cluster.pcs("fresh") or {}).get("status") or {}

    wait_for(lambda: status().get("availableReplicas") == REPLICAS, timeout=90, what="every replica available")
    available = time.monotonic()
    wait_for(lambda: status().get("updatedReplicas") == REPLICAS, timeout=10,
             what="updatedReplicas 3 within 10 s of availableReplicas 3")
    print(f"\nupdatedReplicas followed availableReplicas after {time.monotonic() - available:.1f} s")


async def test_image_change_rolls_one_replica_at_a_time_without_gang_termination(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, watch_factory: Any,
        histories: Histories) -> None:
    cluster.apply(manifest(cluster.namespace, "roll"))
    watch = watch_factory("roll")
    wait_for(lambda: all_at(watch, OLD), timeout=90, what="every pod Ready")
    pcs = wait_for(lambda: (p := cluster.pcs("roll")) and (p.get("status") or {}).get("currentGenerationHash") and p,
                   timeout=30, what="currentGenerationHash")
    first_hash = pcs["status"]["currentGenerationHash"]
    assert (await rollout_status(temporal_client, cluster, "roll")).phase == "Idle"

    since = time.time()
    set_image(cluster, "roll", NEW)
    wait_for(lambda: all_at(watch, NEW), timeout=240, what="every pod recreated with the new image and Ready")
    took = time.time() - since
    print(f"rollout of {PODS} pods across {REPLICAS} replicas took {took:.1f}s")
    assert_rollout(watch, cluster, since, NEW)
    assert watch.update_in_progress, "no PodClique reported UpdateInProgress"
    assert all(p.template_hash for p in watch.live())

    def finished() -> dict[str, Any] | None:
        status = (cluster.pcs("roll") or {}).get("status") or {}
        done = status.get("updatedReplicas") == REPLICAS and status.get("currentGenerationHash") != first_hash
        progress = status.get("updateProgress") or {}
        return status if done and progress.get("updateEndedAt") else None

    status = wait_for(finished, timeout=60, what="PCS status: updatedReplicas 3, update ended")
    condition = next(c for c in status["conditions"] if c["type"] == "UpdateInProgress")
    assert (condition["status"], condition["reason"]) == ("False", "UpdateComplete")
    assert status["updateProgress"]["updatedPodCliquesCount"] == status["updateProgress"]["totalPodCliquesCount"] == 3
    assert "currentlyUpdating" not in status["updateProgress"], status["updateProgress"]
    pclq = cluster.pclq("roll-0-frontend")
    assert pclq is not None and pclq["status"]["updatedReplicas"] == 2
    assert pclq["status"]["currentPodTemplateHash"] == next(
        p.template_hash for p in watch.live() if p.pclq == "roll-0-frontend")
    rollout = await rollout_status(temporal_client, cluster, "roll")
    assert rollout.phase == "Complete" and rollout.updated_replicas == REPLICAS
    turns = [e.what for e in rollout.log if e.what.endswith("'s turn")]
    assert turns == ["replica 0's turn", "replica 1's turn", "replica 2's turn"], rollout.log
    assert len(cluster.events("RollingRecreate")) >= REPLICAS
    await histories.keep(temporal_client.get_workflow_handle(cluster.workflow_id("roll", 1)), "rollout_replica")
    await histories.keep(temporal_client.get_workflow_handle(
        rollout_workflow_id(cluster.namespace, "roll", pcs["metadata"]["uid"])), "rollout_coordinator")


async def test_a_worker_killed_mid_rollout_resumes_and_recreates_no_pod_twice(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, watch_factory: Any) -> None:
    cluster.apply(manifest(cluster.namespace, "crash"))
    watch = watch_factory("crash")
    wait_for(lambda: all_at(watch, OLD), timeout=90, what="every pod Ready")
    since = time.time()
    set_image(cluster, "crash", NEW)
    wait_for(lambda: sum(1 for p in watch.live() if p.image == NEW and p.replica == 0) >= 2, timeout=60,
             what="replica 0 partly updated")
    worker_process.kill()
    await asyncio.sleep(2)
    worker_process.start()
    wait_for(lambda: all_at(watch, NEW), timeout=240, what="rollout finished by the new worker")
    assert_rollout(watch, cluster, since, NEW)


async def test_pause_resume_and_a_change_during_the_rollout_retargets(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, watch_factory: Any) -> None:
    """Through the CLI, as an operator would: `grove-temporal rollout pause|status|resume`."""
    ns, address = cluster.namespace, worker_process.temporal_address
    cluster.apply(manifest(ns, "ctl"))
    watch = watch_factory("ctl")
    wait_for(lambda: all_at(watch, OLD), timeout=90, what="every pod Ready")
    missing = cli("rollout", "status", "nope", "-n", ns, address=address)
    assert missing.returncode == 1 and f"{ns}/nope" in missing.stderr
    paused = wait_for(lambda: (r := cli("rollout", "pause", "ctl", "-n", ns, "--reason", "test", address=address))
                      .returncode == 0 and r, timeout=20, what="rollout pause accepted")
    assert "accepted" in paused.stdout
    since = time.time()
    set_image(cluster, "ctl", NEW)
    await asyncio.sleep(8)
    assert all(p.image == OLD for p in watch.live()), "a paused rollout recreated pods"
    shown = cli("rollout", "status", "ctl", "-n", ns, "-o", "json", address=address)
    assert shown.returncode == 0 and json.loads(shown.stdout)["phase"] == "Paused", shown.stdout
    table = cli("rollout", "status", "ctl", "-n", ns, address=address)
    assert "PAUSED: test" in table.stdout and "paused: test" in table.stdout
    resumed = cli("rollout", "resume", "ctl", "-n", ns, address=address)
    assert resumed.returncode == 0 and "rollout resumed" in resumed.stdout
    wait_for(lambda: any(p.image == NEW for p in watch.live()), timeout=60, what="rollout moving after resume")
    # Change again while replica 0 is being updated: retarget, pods already at NEWER are not recreated again.
    set_image(cluster, "ctl", NEWER)
    wait_for(lambda: all_at(watch, NEWER), timeout=300, what="every pod at the newest image")
    samples = watch.unavailable_since(since)
    assert max((len(d) for _, d in samples), default=0) <= 1
    recreated = watch.recreated()
    # Each pod was recreated once or twice (once if its turn came after the retarget), never more, and only the pods
    # recreated for NEW before the retarget were recreated twice.
    assert all(n in (1, 2) for n in recreated.values()), recreated
    twice = {name for name, n in recreated.items() if n == 2}
    assert all(name.startswith("ctl-0-") for name in twice), twice
    assert cluster.events("GangTerminated") == []
    status = await rollout_status(temporal_client, cluster, "ctl")
    assert any("paused" in e.what for e in status.log) and any("was " in e.what for e in status.log), status.log


async def test_progress_deadline_halts_the_rollout(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, watch_factory: Any) -> None:
    body = manifest(cluster.namespace, "stuck")
    body["spec"]["template"]["cliques"][0]["rollingUpdate"] = {"maxUnavailable": 1, "progressDeadline": "4s"}
    cluster.apply(body)
    watch = watch_factory("stuck")
    wait_for(lambda: all_at(watch, OLD), timeout=90, what="every pod Ready")
    # The new template's pods never become Ready (as a failing readiness probe would do).
    pcs = cluster.pcs("stuck")
    assert pcs is not None
    cliques = pcs["spec"]["template"]["cliques"]
    cliques[0]["annotations"] = {"grove-temporal.io/fake-readiness": "fail"}
    cluster.patch_pcs("stuck", {"spec": {"template": {"cliques": cliques}}})

    def halted() -> dict[str, Any] | None:
        status = (cluster.pcs("stuck") or {}).get("status") or {}
        return next((c for c in status.get("conditions") or [] if c["type"] == "UpdateInProgress"
                     and c["reason"] == "ProgressDeadlineExceeded"), None)

    condition = wait_for(halted, timeout=90, what="ProgressDeadlineExceeded")
    assert condition["status"] == "Unknown" and "stuck-0-frontend" in condition["message"]
    wait_for(lambda: cluster.events("ProgressDeadlineExceeded"), timeout=30, what="Event")
    await asyncio.sleep(6)
    # halted: replica 0's frontend lost one pod to the update (maxUnavailable 1), nothing else was touched
    assert all(p.image == OLD for p in watch.live() if p.replica != 0)
    recreated = {n: c for n, c in watch.recreated().items() if c}
    assert set(recreated) == {"stuck-0-frontend-0"}, recreated
    status = await rollout_status(temporal_client, cluster, "stuck")
    assert status.phase == "Halted" and status.current == 0
    assert cluster.events("GangTerminated") == []


async def test_on_delete_recreates_nothing_until_a_pod_is_deleted(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, watch_factory: Any) -> None:
    cluster.apply(manifest(cluster.namespace, "od", updateStrategy={"type": "OnDelete"}))
    watch = watch_factory("od")
    wait_for(lambda: all_at(watch, OLD), timeout=90, what="every pod Ready")
    set_image(cluster, "od", NEW)
    await asyncio.sleep(10)
    assert all(p.image == OLD for p in watch.live()), "OnDelete recreated pods by itself"
    pod = next(p for p in watch.live() if p.name == "od-1-frontend-1")
    cluster.kube.delete(PODS_RESOURCE, cluster.namespace, pod.name, uid=pod.uid)
    wait_for(lambda: any(p.name == "od-1-frontend-1" and p.image == NEW and p.ready for p in watch.live()),
             timeout=60, what="the deleted pod back with the new image")
    assert {n for n, c in watch.recreated().items() if c} == {"od-1-frontend-1"}
    status = (cluster.pcs("od") or {}).get("status") or {}
    assert status.get("updatedReplicas") == 0
