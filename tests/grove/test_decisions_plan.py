"""Operator force-terminate requests and the wording of termination reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from grove.durations import format_duration
from grove.evaluate import ReplicaMemory, forget_terminated
from grove.termination import Scope, clock, forced_termination
from grove.topology import CliqueUnit, ReplicaTopology, ScalingGroupUnit

NOW = datetime(2025, 6, 1, 3, 0, 0, tzinfo=UTC)

TOPOLOGY = ReplicaTopology(
    pcs="p",
    replica=1,
    cliques=(
        CliqueUnit(name="p-1-router", clique="router", replicas=1, min_available=1),
        *(
            CliqueUnit(
                name=f"p-1-sg-{j}-worker",
                clique="worker",
                replicas=2,
                min_available=2,
                scaling_group="p-1-sg",
                scaling_group_replica=j,
            )
            for j in range(2)
        ),
    ),
    scaling_groups=(ScalingGroupUnit(name="p-1-sg", config_name="sg", replicas=2, min_available=1),),
)


def test_forced_pcs_replica_termination_deletes_every_podclique() -> None:
    termination = forced_termination(TOPOLOGY, NOW, "node pool drained")
    assert termination.scope is Scope.PCS_REPLICA and termination.forced
    assert termination.cliques == ("p-1-router", "p-1-sg-0-worker", "p-1-sg-1-worker")
    assert (termination.deadline, termination.breach_start, termination.delay) == (NOW, None, None)
    assert termination.reason == (
        "Gang-terminating PodCliqueSet p replica 1 (all 3 PodCliques): forced by operator: node pool drained"
    )


def test_forced_pcsg_replica_termination_deletes_that_replica_only() -> None:
    termination = forced_termination(
        TOPOLOGY, NOW, "bad GPU", scaling_group="p-1-sg", scaling_group_replica=1
    )
    assert (termination.scope, termination.scaling_group, termination.scaling_group_replica) == (
        Scope.PCSG_REPLICA,
        "p-1-sg",
        1,
    )
    assert termination.cliques == ("p-1-sg-1-worker",)


@pytest.mark.parametrize(
    ("scaling_group", "replica", "message"),
    [
        ("p-1-nope", 0, "'p-1-nope' does not exist in replica 1 \\(have: p-1-sg\\)"),
        ("p-1-sg", 2, "has replicas 0..1, not 2"),
        ("p-1-sg", None, "has replicas 0..1, not None"),
        (None, 0, "without scaling_group"),
    ],
)
def test_forced_termination_of_something_that_does_not_exist_is_rejected(
    scaling_group: str | None, replica: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        forced_termination(TOPOLOGY, NOW, "x", scaling_group=scaling_group, scaling_group_replica=replica)


def test_forgetting_a_forced_termination_starts_new_incarnations() -> None:
    memory = ReplicaMemory(
        was_available={"p-1-router": "a", "p-1-sg-0-worker": "b", "p-1-sg-1-worker": "c"},
        clique_breach_starts={"p-1-sg-0-worker": NOW},
        scaling_group_breach_starts={"p-1-sg": NOW},
    )
    after = forget_terminated(memory, forced_termination(TOPOLOGY, NOW, "x", "p-1-sg", 0))
    assert after.was_available == {"p-1-router": "a", "p-1-sg-1-worker": "c"}
    assert after.clique_breach_starts == {}
    assert after.terminated == {"p-1-sg-0-worker": "b"}
    everything = forget_terminated(memory, forced_termination(TOPOLOGY, NOW, "x"))
    assert everything.was_available == {} and everything.scaling_group_breach_starts == {}


@pytest.mark.parametrize(
    ("span", "text"),
    [
        (timedelta(seconds=30), "30s"),
        (timedelta(hours=4), "4h"),
        (timedelta(hours=2, minutes=30), "2h30m"),
        (timedelta(minutes=1, milliseconds=500), "1m0.5s"),
        (timedelta(days=1, seconds=1), "24h1s"),
        (timedelta(milliseconds=500), "500ms"),  # as Go writes it; one formatter for every duration
        (timedelta(0), "0s"),
    ],
)
def test_delays_are_written_as_in_manifests(span: timedelta, text: str) -> None:
    assert format_duration(span) == text


def test_times_are_utc_to_the_second_unless_finer() -> None:
    assert clock(NOW) == "2025-06-01T03:00:00Z"
    assert clock(NOW + timedelta(milliseconds=250)) == "2025-06-01T03:00:00.250Z"


def test_forced_termination_needs_an_aware_time() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        forced_termination(TOPOLOGY, NOW.replace(tzinfo=None), "x")


def test_a_pod_is_releasable_only_while_gated_by_us_and_referenced_by_its_gang() -> None:
    from grove.release import releasable

    assert releasable(True, "p-0-a-0", {"p-0-a-0", "p-0-a-1"})
    assert not releasable(True, "p-0-a-2", {"p-0-a-0"}), "not yet in podReferences"
    assert not releasable(False, "p-0-a-0", {"p-0-a-0"}), "our gate is already gone"
