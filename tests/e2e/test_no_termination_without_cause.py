"""S4 and S7: breaches that must never terminate anything.

S4: without terminationDelay gang termination is off, but the breach is still computed and mirrored.
S7: a PodClique that never reached minAvailable is not breached (NeverAvailable), however long it stays short.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

from temporalio.client import Client

from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, is_ready, pcs_manifest, wait_for
from workflows.messages import Phase

BREACHED = "MinAvailableBreached"


def _breach_condition(cluster: Cluster, pclq: str, status: str) -> dict | None:
    condition = cluster.condition("pclq", pclq, BREACHED)
    return condition if condition is not None and condition["status"] == status else None


async def test_without_termination_delay_a_breach_is_mirrored_and_nothing_is_deleted(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, histories: Histories) -> None:
    cluster.apply(pcs_manifest("nodelay", cluster.namespace, cliques=[clique("frontend", 2, 2), clique("api", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    replica = Replica(temporal_client, cluster, "nodelay")
    await replica.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    broke = time.monotonic()
    cluster.fail_readiness("nodelay-0-frontend-1")
    condition = wait_for(lambda: _breach_condition(cluster, "nodelay-0-frontend", "True"), timeout=15,
                         what="MinAvailableBreached=True on nodelay-0-frontend")
    print(f"\nS4 breach mirrored on the PodClique {time.monotonic() - broke:.2f}s after readiness failed")
    assert condition["reason"] == "InsufficientReadyPods"
    assert condition["message"].startswith("1 of 2 required pods ready")
    healthy = cluster.condition("pclq", "nodelay-0-api", BREACHED)
    assert healthy is not None and (healthy["status"], healthy["reason"]) == ("False", "SufficientReadyPods")
    status = await replica.wait(lambda s: any(c.name == "nodelay-0-frontend" and c.breached == "True"
                                              for c in s.cliques), what="breach in the status query")
    assert status.deadlines == (), "no terminationDelay: no clock may run"

    await asyncio.sleep(12)  # far past any delay a wrong default could have used
    assert cluster.inventory() == before, "nothing deleted or recreated"
    assert _breach_condition(cluster, "nodelay-0-frontend", "True") is not None, "still mirrored as breached"
    status = await replica.status()
    assert status.terminations_total == 0 and status.incarnation == 1 and status.deadlines == ()
    assert status.phase is Phase.BREACHED, "breached, even with gang termination off"
    assert not cluster.events("GangTerminated")
    (detected,) = cluster.events("BreachDetected")
    assert "nodelay-0-frontend" in detected["message"] and "no termination pending" in detected["message"]
    await histories.keep(replica.handle, "s4_breach_without_termination_delay")


async def test_a_podclique_that_never_reached_min_available_is_never_terminated(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, histories: Histories) -> None:
    delay_s = 3
    # Every worker pod starts with a failing readiness probe (the clique template's annotation reaches the pods).
    worker = {**clique("worker", 3, 3), "annotations": {FAKE_READINESS_ANNOTATION: FAKE_READINESS_FAIL}}
    cluster.apply(pcs_manifest("never", cluster.namespace, termination_delay=f"{delay_s}s",
                               cliques=[clique("frontend", 2, 2), worker]))
    wait_for(lambda: len([p for p in cluster.pods() if p.get("status", {}).get("phase") == "Running"]) == 5,
             timeout=60, what="5 Running pods")
    assert not any(is_ready(p) for p in cluster.pods_of("never-0-worker")), "worker pods were never Ready"
    # Two of the three recover; never-0-worker-2 keeps failing from the start: 2 of 3 ready, never available.
    cluster.fail_readiness("never-0-worker-0", failing=False)
    cluster.fail_readiness("never-0-worker-1", failing=False)
    wait_for(lambda: sum(is_ready(p) for p in cluster.pods_of("never-0-worker")) == 2, timeout=15,
             what="2 of 3 worker pods Ready")
    replica = Replica(temporal_client, cluster, "never")
    status = await replica.wait(lambda s: any(c.name == "never-0-worker" and c.ready == 2 for c in s.cliques),
                                what="2 ready workers observed")
    before = cluster.inventory()
    seen_at = datetime.now(UTC)

    await asyncio.sleep(3 * delay_s + 2)
    assert cluster.inventory() == before, "a never-available PodClique must not be terminated"
    status = await replica.status()
    worker_row = next(c for c in status.cliques if c.name == "never-0-worker")
    assert (worker_row.was_available, worker_row.breached, worker_row.reason) == (False, "False", "NeverAvailable")
    assert status.deadlines == () and status.terminations_total == 0
    condition = cluster.condition("pclq", "never-0-worker", BREACHED)
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "NeverAvailable")
    assert not cluster.events("GangTerminated")
    print(f"\nS7 never-available clique left alone for {(datetime.now(UTC) - seen_at).total_seconds():.1f}s "
          f"(terminationDelay {delay_s}s)")

    # The same clique once available and then short IS breached: the gate above, not a dead clock, held it.
    cluster.fail_readiness("never-0-worker-2", failing=False)
    await replica.wait(lambda s: any(c.name == "never-0-worker" and c.was_available for c in s.cliques),
                       what="worker clique available")
    cluster.fail_readiness("never-0-worker-2")
    breached = await replica.wait(lambda s: bool(s.deadlines), what="breach deadline")
    assert breached.deadlines[0].target == "never-0-worker"
    wait_for(lambda: cluster.live_pclq_uids().get("never-0-worker") not in (None, before["PodClique/never-0-worker"]),
             timeout=delay_s + 30, what="replica terminated and recreated")
    status = await replica.status()
    assert status.terminations_total == 1
    assert status.terminations[0].at >= breached.deadlines[0].due_at
    # The recreated workers start failing again: a new, never-available incarnation, so no second termination.
    await asyncio.sleep(2 * delay_s + 2)
    status = await replica.status()
    assert status.terminations_total == 1 and status.incarnation == 2
    worker_row = next(c for c in status.cliques if c.name == "never-0-worker")
    assert worker_row.reason == "NeverAvailable" and not worker_row.was_available
    await histories.keep(replica.handle, "s7_never_available")
