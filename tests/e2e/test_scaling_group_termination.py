"""S5 and S6: gang termination of PodCliqueScalingGroups.

S5: one PCSG replica breached while its PCSG still meets minAvailable → only that PCSG replica is recreated, after
    the PCSG's own terminationDelay (which overrides the PCS's).
S6: a PCSG breached as a whole (healthy replicas < minAvailable) → the whole PCS replica is terminated after the
    PCSG's effective delay.
"""

from __future__ import annotations

import time
from datetime import timedelta

from temporalio.client import Client

from tests.e2e.conftest import Histories
from tests.e2e.harness import (
    Cluster,
    Replica,
    Timeline,
    WorkerProcess,
    clique,
    describe,
    is_gated,
    pcs_manifest,
    wait_for,
)
from workflows.messages import Phase, ReplicaStatus

PCSG_DELAY_S = 4
PCS_DELAY_S = 40  # clearly longer: acting after it would prove the override was ignored


def _manifest(name: str, namespace: str, *, replicas: int = 1, sg_replicas: int, sg_min: int) -> dict:
    return pcs_manifest(
        name, namespace, replicas=replicas, termination_delay=f"{PCS_DELAY_S}s",
        cliques=[clique("router", 1, 1), clique("leader", 1, 1), clique("worker", 2, 2)],
        scaling_groups=[{"name": "prefill", "replicas": sg_replicas, "minAvailable": sg_min,
                         "terminationDelay": f"{PCSG_DELAY_S}s", "cliqueNames": ["leader", "worker"]}],
    )


def _group_pclqs(pcs: str, j: int) -> list[str]:
    return [f"{pcs}-0-prefill-{j}-leader", f"{pcs}-0-prefill-{j}-worker"]


def _recreated(cluster: Cluster, before: dict[str, str], pclqs: list[str]) -> bool:
    now = cluster.inventory()
    return all(now.get(f"PodClique/{n}") not in (None, before[f"PodClique/{n}"]) for n in pclqs)


def _untouched(before: dict[str, str], after: dict[str, str], changed_pclqs: list[str]) -> dict[str, str]:
    """Objects of `before` whose UID changed or vanished, other than the PodCliques expected to change and their
    pods and scaled PodGang."""
    moved = {k: v for k, v in before.items() if after.get(k) != v}
    return {k: v for k, v in moved.items()
            if not any(k.split("/", 1)[1].startswith(p) for p in changed_pclqs)}


async def _terminate_pcsg_replica(cluster: Cluster, replica: Replica, timeline: Timeline, pcs: str, j: int,
                                  pod: str, scaled_gang: str | None) -> ReplicaStatus:
    """Break `pod` of PCSG replica j, wait for exactly that PCSG replica to be recreated; return the breach status."""
    before = cluster.inventory()
    total_before = (await replica.status()).terminations_total
    cluster.fail_readiness(pod)
    breached = await replica.wait(lambda s: bool(s.deadlines), what="PCSG replica deadline")
    deadline = breached.deadlines[0]
    assert (deadline.scope.value, deadline.target) == ("pcsg-replica", f"{pcs}-0-prefill-{j}")
    assert deadline.delay == timedelta(seconds=PCSG_DELAY_S), "the PCSG's own delay, not the PCS's"
    assert breached.phase is Phase.BREACHED

    changed = _group_pclqs(pcs, j)
    wait_for(lambda: _recreated(cluster, before, changed), timeout=PCSG_DELAY_S + 30,
             what=f"PCSG replica {j} recreated")
    status = await replica.status()
    assert status.terminations_total == total_before + 1
    record = status.terminations[-1]
    assert record.scope.value == "pcsg-replica" and record.scaling_group == f"{pcs}-0-prefill"
    assert record.scaling_group_replica == j and set(record.cliques) == set(changed)
    assert record.deadline == deadline.due_at and record.at >= deadline.due_at, "never early"
    assert record.at < deadline.breach_start + timedelta(seconds=PCS_DELAY_S), "the PCS delay was not waited for"
    deleting = min(m["deleting"] for n in changed for m in timeline.of("PodClique", n) if "deleting" in m)
    assert deleting >= deadline.due_at.timestamp(), "nothing deleted before breach start + delay"
    print(f"\nS5 PCSG replica {j}: workflow terminated {(record.at - deadline.due_at).total_seconds() * 1000:.0f} ms "
          f"after its deadline; PodCliques seen deleting "
          f"{(deleting - deadline.due_at.timestamp()) * 1000:.0f} ms after it (delay {PCSG_DELAY_S}s, PCS {PCS_DELAY_S}s)")

    after = cluster.inventory()
    assert _untouched(before, after, changed) == ({f"PodGang/{scaled_gang}": before[f"PodGang/{scaled_gang}"]}
                                                  if scaled_gang else {}), "only that PCSG replica was recreated"
    assert status.incarnation == 1, "the PCS replica itself was not terminated"
    return breached


async def test_one_pcsg_replica_breached_is_recreated_alone_after_the_pcsg_delay(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    # prefill: replicas 3, minAvailable 2 → PCSG replicas 0 and 1 in the base gang, replica 2 in scaled gang s5-0-prefill-0
    cluster.apply(_manifest("s5", cluster.namespace, sg_replicas=3, sg_min=2))
    wait_for(lambda: cluster.ready_pods(10), timeout=60, what="10 Ready pods")
    replica = Replica(temporal_client, cluster, "s5")
    await replica.wait_phase(Phase.AVAILABLE)

    # A scaled-gang replica: its PodCliques and its scaled PodGang are recreated, the rest keeps its UIDs.
    started = time.time()
    await _terminate_pcsg_replica(cluster, replica, timeline, "s5", 2, "s5-0-prefill-2-worker-1", "s5-0-prefill-0")
    wait_for(lambda: cluster.ready_pods(10), timeout=60, what="recreated PCSG replica 2 Ready")
    recreated = [p["metadata"]["name"] for p in cluster.pods("grove.io/podcliquescalinggroup-replica-index=2")]
    print(f"S5 recreated scaled pods: gate release {describe(timeline.latencies('Pod', recreated, 'seen', 'ungated', since=started))}, "
          f"Ready {describe(timeline.latencies('Pod', recreated, 'seen', 'ready', since=started))} after creation")
    await replica.wait_phase(Phase.AVAILABLE)

    # A base-gang replica: its PodCliques are recreated, the base PodGang stays (its references follow the pods).
    started = time.time()
    base_uid = cluster.inventory()["PodGang/s5-0"]
    await _terminate_pcsg_replica(cluster, replica, timeline, "s5", 0, "s5-0-prefill-0-leader-0", None)
    wait_for(lambda: cluster.ready_pods(10), timeout=60, what="recreated PCSG replica 0 Ready")
    assert cluster.inventory()["PodGang/s5-0"] == base_uid
    refs = {r["name"] for g in cluster.pod_gangs()["s5-0"]["spec"]["podgroups"] for r in g["podReferences"]}
    assert {"s5-0-prefill-0-leader-0", "s5-0-prefill-0-worker-0", "s5-0-prefill-0-worker-1"} <= refs
    assert not any(is_gated(p) for p in cluster.pods())
    recreated = [p["metadata"]["name"] for p in cluster.pods("grove.io/podcliquescalinggroup-replica-index=0")]
    print(f"S5 recreated base pods: gate release {describe(timeline.latencies('Pod', recreated, 'seen', 'ungated', since=started))}")
    status = await replica.wait_phase(Phase.AVAILABLE)
    assert status.terminations_total == 2
    assert len(cluster.events("GangTerminated")) == 2
    await histories.keep(replica.handle, "s5_pcsg_replica_termination")


async def test_pcsg_breached_as_a_whole_terminates_the_pcs_replica_after_the_pcsg_delay(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client, timeline: Timeline,
        histories: Histories) -> None:
    # prefill: replicas 2, minAvailable 2 → one broken PCSG replica breaches the PCSG as a whole.
    cluster.apply(_manifest("s6", cluster.namespace, replicas=2, sg_replicas=2, sg_min=2))
    wait_for(lambda: cluster.ready_pods(14), timeout=60, what="14 Ready pods")
    replica = Replica(temporal_client, cluster, "s6")
    await replica.wait_phase(Phase.AVAILABLE)
    await Replica(temporal_client, cluster, "s6", 1).wait_phase(Phase.AVAILABLE)
    before = cluster.inventory()

    cluster.fail_readiness("s6-0-prefill-1-worker-0")
    breached = await replica.wait(lambda s: bool(s.deadlines), what="PCSG-wide deadline")
    deadline = breached.deadlines[0]
    assert (deadline.scope.value, deadline.target) == ("pcs-replica", "s6-0-prefill")
    assert deadline.delay == timedelta(seconds=PCSG_DELAY_S)
    assert len(breached.deadlines) == 1, "no PCSG-replica clock while the PCSG is breached as a whole"
    condition = wait_for(lambda: (c := cluster.condition("pcsg", "s6-0-prefill", "MinAvailableBreached"))
                         and c["status"] == "True" and c, timeout=10, what="PCSG breach mirrored")
    assert condition["reason"] == "InsufficientAvailablePodCliqueScalingGroupReplicas"

    replica0 = [k.split("/", 1)[1] for k in before if k.startswith("PodClique/s6-0-")]
    assert len(replica0) == 5
    wait_for(lambda: _recreated(cluster, before, replica0), timeout=PCSG_DELAY_S + 30,
             what="every PodClique of replica 0 recreated")
    status = await replica.status()
    assert status.terminations_total == 1 and status.incarnation == 2
    record = status.terminations[0]
    assert record.scope.value == "pcs-replica" and set(record.cliques) == set(replica0)
    assert record.at >= deadline.due_at, "never early"
    assert record.at < deadline.breach_start + timedelta(seconds=PCS_DELAY_S), "the PCSG's delay applies"
    deleting = min(m["deleting"] for n in replica0 for m in timeline.of("PodClique", n) if "deleting" in m)
    assert deleting >= deadline.due_at.timestamp(), "nothing deleted before breach start + delay"
    print(f"\nS6 PCS replica: workflow terminated {(record.at - deadline.due_at).total_seconds() * 1000:.0f} ms after "
          f"its deadline; PodCliques seen deleting {(deleting - deadline.due_at.timestamp()) * 1000:.0f} ms after it")

    after = cluster.inventory()
    assert {k: v for k, v in before.items() if "s6-1" in k} == {k: v for k, v in after.items() if "s6-1" in k}, \
        "replica 1 untouched"
    wait_for(lambda: cluster.ready_pods(14), timeout=60, what="replica 0 back to Ready")
    await replica.wait_phase(Phase.AVAILABLE)
    events = cluster.events("GangTerminated")
    assert len(events) == 1 and "s6-0-prefill" in events[0]["message"]
    await histories.keep(replica.handle, "s6_pcsg_breach_pcs_replica_termination")
