"""S8: a breach that heals before its deadline cancels it; a later breach starts a new clock of its own."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from temporalio.client import Client

from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Replica, Timeline, WorkerProcess, clique, pcs_manifest, wait_for
from workflows.messages import Phase

DELAY_S = 6


async def test_a_healed_breach_cancels_its_deadline_and_a_new_breach_starts_a_new_one(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    cluster.apply(pcs_manifest("heal", cluster.namespace, termination_delay=f"{DELAY_S}s",
                               cliques=[clique("frontend", 2, 2), clique("api", 2, 1)]))
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="4 Ready pods")
    replica = Replica(temporal_client, cluster, "heal")
    await replica.wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    # First breach, healed well before its deadline.
    cluster.fail_readiness("heal-0-frontend-1")
    first = (await replica.wait(lambda s: bool(s.deadlines), what="first deadline")).deadlines[0]
    assert first.target == "heal-0-frontend"
    await asyncio.sleep(2)
    cluster.fail_readiness("heal-0-frontend-1", failing=False)
    healed = await replica.wait(lambda s: not s.deadlines and s.phase is Phase.AVAILABLE, what="breach healed")
    assert datetime.now(UTC) < first.due_at, "the heal must come before the first deadline for this test to mean anything"
    frontend = next(c for c in healed.cliques if c.name == "heal-0-frontend")
    assert frontend.breached == "False" and frontend.breach_start is None and frontend.was_available
    print(f"\nS8 first breach healed {(first.due_at - datetime.now(UTC)).total_seconds():.1f}s before its deadline")

    await asyncio.sleep(max(0.0, (first.due_at - datetime.now(UTC)).total_seconds()) + 4)
    assert cluster.inventory() == before, "a healed breach terminates nothing"
    status = await replica.status()
    assert status.terminations_total == 0 and status.deadlines == () and not cluster.events("GangTerminated")

    # Second breach: a new clock from the new breach time, not the first breach's.
    broke = datetime.now(UTC)
    cluster.fail_readiness("heal-0-frontend-0")
    second = (await replica.wait(lambda s: bool(s.deadlines), what="second deadline")).deadlines[0]
    assert second.breach_start >= broke > first.due_at, (second, broke, first)
    assert second.due_at == second.breach_start + timedelta(seconds=DELAY_S)
    wait_for(lambda: cluster.live_pclq_uids().get("heal-0-frontend") not in (None, before["PodClique/heal-0-frontend"]),
             timeout=DELAY_S + 30, what="terminated after the second deadline")
    status = await replica.status()
    assert status.terminations_total == 1
    record = status.terminations[0]
    assert record.breach_start == second.breach_start and record.deadline == second.due_at
    assert record.at >= second.due_at
    deleting = min(m["deleting"] for m in timeline.of("PodClique", "heal-0-frontend") if "deleting" in m)
    assert deleting >= second.due_at.timestamp()
    print(f"S8 second breach: new breach_start {(second.breach_start - first.breach_start).total_seconds():.1f}s after "
          f"the first; terminated {(record.at - second.due_at).total_seconds() * 1000:.0f} ms after its deadline")
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="replica back to Ready")
    await histories.keep(replica.handle, "s8_heal_then_new_breach")
