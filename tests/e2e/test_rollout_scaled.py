"""A rolling update covers what `/scale` made (issues 12 and 13): the rollout plans from the counts stored on the
replica's PCSGs and PodCliques, as the replica workflows do, not from the template's.

Replica 0's PCSG is scaled 2 → 4 and replica 1's standalone PodClique 3 → 2 through the scale subresource (as
`kubectl scale` and an HPA write them); then the image changes. (With the rollout workflow planning from the
template's counts, checked: the pods were recreated, but it saw replica 1's frontend one pod short for ever, so
updatedReplicas stayed at 1 and the update never ended; this test then fails at its last wait.) Asserted from a watch of the real pods: every pod,
the extra ones included, recreated exactly once with the new image, the written counts kept, at most one PCS
replica unavailable at any instant, no gang termination, and the PCS status counts both replicas as updated.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from temporalio.client import Client

from activities.kubeapi import PODCLIQUES, SCALINGGROUPS
from tests.e2e.harness import Cluster, WorkerProcess, clique, pcs_manifest, wait_for
from tests.e2e.rollout_watch import RolloutWatch, Shape
from tests.e2e.test_rolling_update import NEW, OLD, set_image
from tests.e2e.test_scaling import held, scale, spec_replicas

REPLICAS = 2
# replica 0: frontend 3 + sg 4 x worker 2; replica 1: frontend 2 + sg 2 x worker 2
PODS = (3 + 4 * 2) + (2 + 2 * 2)
SHAPE = Shape(standalone={"frontend": 2}, group_cliques={"worker": 1}, group="sg", group_replicas=4, group_min=1)


@pytest.fixture
def watch(cluster: Cluster) -> Iterator[RolloutWatch]:
    started = RolloutWatch(cluster.kube, cluster.namespace, "rs", REPLICAS, SHAPE).start()
    yield started
    started.stop()


def all_at(watch: RolloutWatch, image: str) -> bool:
    live = watch.live()
    return len(live) == PODS and all(p.image == image and p.ready for p in live)


async def test_a_rollout_recreates_the_replicas_a_scale_write_added_and_keeps_the_counts(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, watch: RolloutWatch) -> None:
    body: dict[str, Any] = pcs_manifest(
        "rs", cluster.namespace, replicas=REPLICAS, termination_delay="1s",
        cliques=[clique("frontend", 3, 2), clique("worker", 2, 1)],
        scaling_groups=[{"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["worker"]}])
    cluster.apply(body)
    wait_for(lambda: len([p for p in watch.live() if p.ready]) == 2 * (3 + 2 * 2), timeout=90,
             what="every pod of the template's counts Ready")
    scale(cluster, SCALINGGROUPS, "rs-0-sg", 4)
    scale(cluster, PODCLIQUES, "rs-1-frontend", 2)
    wait_for(lambda: all_at(watch, OLD), timeout=120, what=f"{PODS} pods Ready after the scale writes")
    held(cluster, SCALINGGROUPS, "rs-0-sg", 4, seconds=2)

    since = time.time()
    set_image(cluster, "rs", NEW)
    wait_for(lambda: all_at(watch, NEW), timeout=240, what="every pod, the scaled ones too, at the new image")
    took = time.time() - since

    live = {p.name for p in watch.live()}
    assert "rs-1-frontend-2" not in live  # the scale-in removed it before the change
    recreated = {name: n for name, n in watch.recreated().items() if name in live}
    extra = sorted(n for n in recreated if n.startswith(("rs-0-sg-2-", "rs-0-sg-3-")))
    samples = watch.unavailable_since(since)
    worst = max((len(d) for _, d in samples), default=0)
    print(f"\nrollout of {PODS} pods ({len(extra)} of them added through /scale) took {took:.1f}s; "
          f"at most {worst} replica(s) unavailable over {len(samples)} watched events")
    assert len(extra) == 2 * 2, extra  # the workers of rs-0-sg-2 and rs-0-sg-3
    assert len(recreated) == PODS, sorted(recreated)
    assert all(n == 1 for n in recreated.values()), recreated
    assert worst <= 1, [s for s in samples if len(s[1]) > 1][:5]
    assert spec_replicas(cluster, SCALINGGROUPS, "rs-0-sg") == 4
    assert spec_replicas(cluster, PODCLIQUES, "rs-1-frontend") == 2
    assert cluster.events("GangTerminated") == []

    def updated() -> dict[str, Any] | None:
        status = (cluster.pcs("rs") or {}).get("status") or {}
        progress = status.get("updateProgress") or {}
        return status if status.get("updatedReplicas") == REPLICAS and progress.get("updateEndedAt") else None

    wait_for(updated, timeout=60, what="PCS status: updatedReplicas 2 and the update ended")
