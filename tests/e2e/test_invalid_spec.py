"""S12: bad input changes nothing (the workflow's own line of defence).

The PodCliqueSet CRD's admission rules refuse these manifests at the door (tests/deploy/test_admission.py); here
they are suspended, as on a cluster with Grove's own CRDs or for objects stored before the rules existed, so that
the replica workflow meets the bad input.

1. An invalid PodCliqueSet gets SpecValid=False (every problem listed) and an InvalidSpec Event, and no object.
2. An invalid update of a running, valid PodCliqueSet leaves its replica exactly as it was — no pod added, none
   deleted, no gate released, no termination — while the workflow shows phase Invalid with the problems; fixing the
   spec resumes it.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from activities.kubeapi import SERVICES
from grove import names
from tests.corpus.admission import rules_suspended
from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, is_ready, pcs_manifest, wait_for
from workflows.messages import Phase, ReplicaOutcome

if TYPE_CHECKING:
    from localstack.stack import LocalStack

POOL_LABEL = "grove-temporal.io/e2e-pool"


@pytest.fixture(autouse=True)
def without_admission_rules(kube: ApiClient, cluster: Cluster) -> Iterator[None]:
    with rules_suspended(kube, cluster.namespace):
        yield


def _spec_valid(cluster: Cluster, pcs: str, status: str) -> dict | None:
    condition = cluster.condition("pcs", pcs, "SpecValid")
    return condition if condition is not None and condition["status"] == status else None


async def test_an_invalid_pcs_gets_a_condition_and_an_event_and_no_objects(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, histories: Histories) -> None:
    bad = pcs_manifest("bad", cluster.namespace, cliques=[clique("frontend", 2, 3), clique("worker", 1, 1)],
                       scaling_groups=[{"name": "sg", "replicas": 1, "minAvailable": 1, "terminationDelay": "5s",
                                        "cliqueNames": ["worker"]}])
    cluster.apply(bad)
    condition = wait_for(lambda: _spec_valid(cluster, "bad", "False"), timeout=30, what="SpecValid=False")
    print(f"\nS12 SpecValid=False: {condition['message']}")
    assert condition["reason"] == "Invalid"
    assert "spec.template.cliques[0].spec.minAvailable" in condition["message"]
    assert "terminationDelay" in condition["message"]
    events = wait_for(lambda: cluster.events("InvalidSpec"), timeout=10, what="InvalidSpec event")
    assert events[0]["type"] == "Warning" and "spec.template.cliques[0].spec.minAvailable" in events[0]["message"]
    replica = Replica(temporal_client, cluster, "bad")
    status = await replica.wait_phase(Phase.INVALID)
    assert any("minAvailable" in p for p in status.problems), status.problems
    await asyncio.sleep(3)
    assert cluster.inventory() == {}, "no PodClique, PCSG, PodGang or pod"
    assert not cluster.kube.list_items(SERVICES, cluster.namespace)
    await histories.keep(replica.handle, "s12_invalid_pcs")


async def test_an_invalid_update_of_a_valid_pcs_changes_nothing_until_fixed(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, stack: LocalStack,
        histories: Histories) -> None:
    delay_s = 3
    # The PCSG's workers may only run on a node pool that does not exist yet: the base gang (frontend + sg replica
    # 0) cannot be scheduled, so the scaled gang's pod (sg replica 1) stays gated until the pool appears. The test
    # needs the frontend Ready meanwhile, which only pod-by-pod placement gives: the `none` backend (gates only);
    # with native gang scheduling the whole base gang rightly waits (tests/e2e/test_native_gangs.py).
    worker = clique("worker", 1, 1)
    worker["spec"]["podSpec"]["nodeSelector"] = {POOL_LABEL: "s12"}
    good = pcs_manifest("upd", cluster.namespace, termination_delay=f"{delay_s}s",
                        cliques=[clique("frontend", 2, 2), worker],
                        scaling_groups=[{"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["worker"]}],
                        annotations={names.ANNOTATION_SCHEDULER_BACKEND: "none"})
    cluster.apply(good)
    wait_for(lambda: len(cluster.pods()) == 4 and sum(is_ready(p) for p in cluster.pods()) == 2, timeout=60,
             what="4 pods, the 2 frontend pods Ready")
    replica = Replica(temporal_client, cluster, "upd")
    await replica.wait(lambda s: any(c.name == "upd-0-frontend" and c.was_available for c in s.cliques),
                       what="frontend available")
    wait_for(lambda: _spec_valid(cluster, "upd", "True"), timeout=30, what="SpecValid=True")
    assert cluster.gates()["upd-0-sg-1-worker-0"], "scaled pod gated while the base gang is unscheduled"
    before, gates_before = cluster.inventory(), cluster.gates()
    status_before = await replica.status()

    # Invalid update that also asks for changes: one more frontend pod, and a worker minAvailable > replicas.
    invalid = copy.deepcopy(good["spec"])
    invalid["template"]["cliques"][0]["spec"]["replicas"] = 3
    invalid["template"]["cliques"][1]["spec"]["minAvailable"] = 4
    cluster.patch_pcs("upd", {"spec": invalid})
    held = await replica.wait_phase(Phase.INVALID)
    assert any("spec.template.cliques[1].spec.minAvailable" in p for p in held.problems), held.problems
    wait_for(lambda: _spec_valid(cluster, "upd", "False"), timeout=30, what="SpecValid=False after the update")
    assert wait_for(lambda: cluster.events("InvalidSpec"), timeout=10, what="InvalidSpec event")
    assert held.incarnation == status_before.incarnation and held.terminations == status_before.terminations

    # While held: a breach is not acted on...
    cluster.fail_readiness("upd-0-frontend-1")
    breached = await replica.wait(lambda s: any(c.name == "upd-0-frontend" and c.breached == "True"
                                                for c in s.cliques), what="breach observed while held")
    await asyncio.sleep(delay_s + 4)
    assert cluster.inventory() == before, "no termination while the spec is invalid"
    status = await replica.status()
    assert len(status.held) == 1 and "upd-0-frontend" in status.held[0], status.held
    assert not status.deadlines, f"the expired deadline is due and held, not pending: {status.deadlines}"
    cluster.fail_readiness("upd-0-frontend-1", failing=False)
    await replica.wait(lambda s: any(c.name == "upd-0-frontend" and c.breached == "False" for c in s.cliques),
                       what="breach healed")
    # ...and a base gang that becomes schedulable does not get the scaled gang's gate released.
    node = stack.add_nodes(1, labels={POOL_LABEL: "s12"})[0]
    try:
        wait_for(lambda: all(p["spec"].get("nodeName") for p in cluster.pods()
                             if p["metadata"]["name"] in ("upd-0-sg-0-worker-0",)), timeout=30,
                 what="base gang's worker scheduled on the new pool")
        await asyncio.sleep(4)
        assert cluster.gates() == gates_before, "no gate released while the spec is invalid"
        assert cluster.inventory() == before, "no pod added, none deleted"
        status = await replica.status()
        assert status.phase is Phase.INVALID and status.terminations_total == breached.terminations_total == 0

        # Fixed: the replica resumes from where it was. The template's frontend replicas 3 seeds only PodCliques
        # created from now on (DESIGN §4.10, as in Grove): the running frontend keeps its 2 pods.
        fixed = copy.deepcopy(invalid)
        fixed["template"]["cliques"][1]["spec"]["minAvailable"] = 1
        fixed_at = datetime.now(UTC)
        cluster.patch_pcs("upd", {"spec": fixed})
        wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods after the fix")
        status = await replica.wait_phase(Phase.AVAILABLE)
        assert status.problems == () and status.terminations_total == 0
        after = cluster.inventory()
        assert {k: v for k, v in before.items() if after.get(k) != v} == {}, "the running objects were kept"
        wait_for(lambda: _spec_valid(cluster, "upd", "True"), timeout=30, what="SpecValid=True after the fix")
        assert (cluster.pclq("upd-0-frontend") or {})["spec"]["replicas"] == 2
        print(f"\nS12 fixed spec resumed the replica (4 Ready) {(datetime.now(UTC) - fixed_at).total_seconds():.1f}s "
              "after the fix")
        await histories.keep(replica.handle, "s12_invalid_update_then_fixed")
    finally:
        stack.lose_node(node)


async def test_an_invalid_update_that_also_scales_in_deletes_nothing(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    """An invalid update whose spec.replicas also shrinks (or is dropped) must not scale in: the count comes from a
    spec that failed validation. Once valid, a PCS without spec.replicas wants the default, one replica."""
    good = pcs_manifest("shrink", cluster.namespace, replicas=2, cliques=[clique("frontend", 1, 1)])
    cluster.apply(good)
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods (one per replica)")
    first, second = Replica(temporal_client, cluster, "shrink", 0), Replica(temporal_client, cluster, "shrink", 1)
    await second.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    invalid = copy.deepcopy(good["spec"])
    invalid["replicas"] = 1
    invalid["template"]["cliques"][0]["spec"]["minAvailable"] = 4
    cluster.patch_pcs("shrink", {"spec": invalid})
    await second.wait_phase(Phase.INVALID)
    await first.wait_phase(Phase.INVALID)
    # spec.replicas dropped as well: an absent count must not read as 0 either.
    cluster.patch_pcs("shrink", {"spec": {"replicas": None}})
    await asyncio.sleep(4)
    assert (cluster.pcs("shrink") or {})["spec"].get("replicas") is None
    assert cluster.inventory() == before, "nothing scaled in while the spec is invalid"
    assert (await second.status()).phase is Phase.INVALID

    # Fixed, still without spec.replicas: the default (1) applies, so replica 1 is scaled in and replica 0 kept.
    cluster.patch_pcs("shrink", {"spec": {"template": good["spec"]["template"]}})
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("shrink", 1), result_type=ReplicaOutcome)
    outcome = await asyncio.wait_for(handle.result(), timeout=60)
    assert outcome.phase is Phase.SCALED_IN, outcome
    wait_for(lambda: all("shrink-1" not in name for name in cluster.inventory()), timeout=60,
             what="replica 1's objects gone")
    kept = {k: v for k, v in before.items() if "shrink-0" in k}
    assert kept and all(cluster.inventory().get(k) == v for k, v in kept.items()), "replica 0 kept as it was"
    await first.wait_phase(Phase.AVAILABLE)
    wait_for(lambda: ((cluster.pcs("shrink") or {}).get("status") or {}).get("replicas") == 1, timeout=30,
             what="PCS status.replicas mirrored as 1 after the scale-in")
