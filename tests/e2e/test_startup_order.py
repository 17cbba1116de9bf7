"""Issue 13, startup order, end to end with Grove's own sample simple2 (cliqueStartupType Explicit: pca first, pcb
and pcc after it, pcd after both). The gang is released as a whole; a pod of a later clique starts (its waiting
init container ends, KWOK's stage plays it Ready) only after every pod of the cliques it starts after is Ready.
The order is asserted from a pod watch (harness.Timeline); the wait is visible in the status query and the UI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client

from grove import names
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, Timeline, WorkerProcess, is_gated, is_ready, wait_for

SAMPLE = Path(__file__).resolve().parents[1] / "grove" / "data" / "grove_samples" / "simple2-explicit-startup-order.yaml"


def simple2(namespace: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
    doc["metadata"]["namespace"] = namespace
    return doc


def pods_by_clique(cluster: Cluster) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for pod in cluster.pods():
        found.setdefault(pod["metadata"]["labels"][names.LABEL_PODCLIQUE], []).append(pod)
    return found


async def test_simple2_starts_in_the_order_its_comments_describe(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    manifest = simple2(cluster.namespace)
    # pca's pods start with a failing readiness probe (KWOK plays it): they run but are not Ready, so the wait for
    # them is long enough to look at; the test then lets them pass. The whole gang is placed either way.
    pca = manifest["spec"]["template"]["cliques"][0]
    pca["annotations"] = {FAKE_READINESS_ANNOTATION: FAKE_READINESS_FAIL}
    cluster.apply(manifest)
    replica = Replica(temporal_client, cluster, "simple2")

    def waiting() -> dict[str, list[dict[str, Any]]] | None:
        pods = pods_by_clique(cluster)
        later = [p for clique in ("simple2-0-pcb", "simple2-0-pcc", "simple2-0-pcd") for p in pods.get(clique, [])]
        if len(later) != 6 or any(is_gated(p) or not p["spec"].get("nodeName") for p in later):
            return None
        return pods

    pods = wait_for(waiting, timeout=60, what="pcb, pcc, pcd pods released and bound")
    assert all(not is_gated(p) for p in pods["simple2-0-pca"]), "the whole gang was released together"
    for pod in pods["simple2-0-pcd"]:
        annotations = pod["metadata"]["annotations"]
        assert annotations[names.ANNOTATION_STARTUP] == names.STARTUP_WAITING
        assert annotations[names.ANNOTATION_STARTS_AFTER] == "simple2-0-pcb,simple2-0-pcc"
        assert pod["spec"]["initContainers"][0]["name"] == names.STARTUP_WAIT_CONTAINER
    status = await replica.wait(lambda s: bool(s.startup), what="startup order in the status query")
    assert "simple2-0-pcb waits for simple2-0-pca Ready (0/3)" in status.startup, status.startup
    assert any(line.startswith("simple2-0-pcd waits for simple2-0-pcb Ready (0/2), simple2-0-pcc Ready (0/2)")
               for line in status.startup), status.startup
    assert not any(is_ready(p) for clique in ("simple2-0-pcb", "simple2-0-pcc", "simple2-0-pcd")
                   for p in pods[clique]), "nothing started before pca is Ready"

    for pod in pods["simple2-0-pca"]:
        cluster.fail_readiness(pod["metadata"]["name"], failing=False)
    try:
        wait_for(lambda: cluster.ready_pods(9), timeout=90, what="all 9 pods Ready")
    except AssertionError:
        for pod in cluster.pods():
            print(pod["metadata"]["name"], pod["spec"].get("nodeName"), (pod.get("status") or {}).get("phase"),
                  (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_STARTUP),
                  [(c["type"], c["status"]) for c in (pod.get("status") or {}).get("conditions") or []])
        print((await replica.status()).startup)
        raise

    def seen_ready() -> dict[str, list[float]] | None:
        moments = {clique: [timeline.of("Pod", p["metadata"]["name"])[-1].get("ready") for p in members]
                   for clique, members in pods_by_clique(cluster).items()}
        if any(m is None for ms in moments.values() for m in ms):
            return None
        return {clique: [m for m in ms if m is not None] for clique, ms in moments.items()}

    # ready_pods read kube-apiserver; the timeline's pod watch may deliver the last Ready a moment later (CI on
    # 724cde6 read the timeline first and found no Ready moment for one pod).
    ready = wait_for(seen_ready, timeout=10, what="the pod watch saw every pod Ready")
    assert min(ready["simple2-0-pcb"] + ready["simple2-0-pcc"]) >= max(ready["simple2-0-pca"])
    assert min(ready["simple2-0-pcd"]) >= max(ready["simple2-0-pcb"] + ready["simple2-0-pcc"])
    print("\nsimple2 Ready after pca's last pod: pcb/pcc "
          f"{(min(ready['simple2-0-pcb'] + ready['simple2-0-pcc']) - max(ready['simple2-0-pca'])) * 1000:.0f} ms, "
          f"pcd after pcb/pcc {(min(ready['simple2-0-pcd']) - max(ready['simple2-0-pcb'] + ready['simple2-0-pcc'])) * 1000:.0f} ms")
    for pod in cluster.pods():
        annotation = (pod["metadata"].get("annotations") or {}).get(names.ANNOTATION_STARTUP)
        assert annotation in (None, names.STARTUP_RELEASED), pod["metadata"]["name"]
    # The Event is created after the pods' patch, which KWOK may turn Ready first (CI on 363b348 listed the Events
    # between the two, 61 ms after pcb/pcc were Ready, and found pcd's not yet written).
    def pcd_started() -> list[str] | None:
        started = [e["message"] for e in cluster.events("StartupReleased")]
        return started if any("simple2-0-pcd after simple2-0-pcb, simple2-0-pcc Ready" in m for m in started) else None

    wait_for(pcd_started, timeout=10, what="a StartupReleased Event for pcd")
    await replica.wait(lambda s: not s.startup, what="no startup order pending")
    await histories.keep(replica.handle, "startup_order_simple2")
