"""Table tests of the health and termination decisions, one behaviour of seed 002 (gang termination) per test.

Scenarios run `evaluate_replica` over a short timeline the way the replica workflow does: keep the returned memory,
and after carrying out a termination keep `forget_terminated`'s memory.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from grove.availability import (
    BreachReason,
    CliqueObservation,
    ConditionStatus,
    clique_condition,
    reaches_availability,
)
from grove.evaluate import (
    ReplicaEvaluation,
    ReplicaMemory,
    ReplicaObservation,
    evaluate_replica,
    forget_healed,
    forget_terminated,
    remember_reached,
    still_due,
)
from grove.termination import Scope, Termination
from grove.topology import CliqueUnit, ReplicaTopology, ScalingGroupUnit

T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
TRUE, FALSE, UNKNOWN = ConditionStatus.TRUE, ConditionStatus.FALSE, ConditionStatus.UNKNOWN


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def secs(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def build_topology(
    delay: float | None = 30,
    sg_delay: float | None = None,
    sg_replicas: int = 3,
    sg_min_available: int = 2,
) -> ReplicaTopology:
    """PCS p, replica 0: standalone 'frontend' (3 pods, minAvailable 2) and PCSG 'sg' of leader (1/1) + worker
    (2/2) with `sg_replicas` replicas."""
    cliques = [CliqueUnit(name="p-0-frontend", clique="frontend", replicas=3, min_available=2)]
    for j in range(sg_replicas):
        for clique, replicas, min_available in (("leader", 1, 1), ("worker", 2, 2)):
            cliques.append(
                CliqueUnit(
                    name=f"p-0-sg-{j}-{clique}",
                    clique=clique,
                    replicas=replicas,
                    min_available=min_available,
                    scaling_group="p-0-sg",
                    scaling_group_replica=j,
                )
            )
    return ReplicaTopology(
        pcs="p",
        replica=0,
        cliques=tuple(cliques),
        scaling_groups=(
            ScalingGroupUnit(
                name="p-0-sg",
                config_name="sg",
                replicas=sg_replicas,
                min_available=sg_min_available,
                termination_delay=secs(sg_delay) if sg_delay is not None else None,
            ),
        ),
        termination_delay=secs(delay) if delay is not None else None,
    )


class Replica:
    """Drives evaluations like the workflow: every PodClique present and fully ready unless told otherwise."""

    def __init__(self, topology: ReplicaTopology) -> None:
        self.topology = topology
        self.memory = ReplicaMemory()
        self.uids = {c.name: f"uid-{c.name}" for c in topology.cliques}

    def observe(
        self,
        seconds: float,
        ready: dict[str, int] | None = None,
        absent: tuple[str, ...] = (),
        updating: tuple[str, ...] = (),
    ) -> ReplicaEvaluation:
        """`ready` and the other arguments name PodCliques without the 'p-0-' prefix."""
        ready = {f"p-0-{k}": v for k, v in (ready or {}).items()}
        cliques = {
            c.name: CliqueObservation(
                uid=self.uids[c.name],
                ready=ready.get(c.name, c.replicas),
                scheduled=c.replicas,
                pods=c.replicas,
                update_in_progress=c.name in {f"p-0-{u}" for u in updating},
            )
            for c in self.topology.cliques
            if c.name not in {f"p-0-{a}" for a in absent}
        }
        evaluation = evaluate_replica(
            self.topology, ReplicaObservation(cliques=cliques), self.memory, at(seconds)
        )
        self.memory = evaluation.memory
        return evaluation

    def carry_out(self, termination: Termination) -> None:
        """Delete and recreate: the recreated PodCliques get new UIDs."""
        self.memory = forget_terminated(self.memory, termination)
        for name in termination.cliques:
            self.uids[name] = self.uids[name] + "'"


def status(evaluation: ReplicaEvaluation, clique: str) -> tuple[ConditionStatus, BreachReason]:
    condition = evaluation.cliques[f"p-0-{clique}"].condition
    return condition.status, condition.reason


# --- PodClique level detection: the four-step order ------------------------------------------------------------

UNIT = CliqueUnit(name="p-0-worker", clique="worker", replicas=4, min_available=3)


@pytest.mark.parametrize(
    ("ready", "was_available", "updating", "expected"),
    [
        # 1. ready >= minAvailable wins over everything else
        (3, False, False, (FALSE, BreachReason.SUFFICIENT_READY_PODS)),
        (4, True, True, (FALSE, BreachReason.SUFFICIENT_READY_PODS)),
        (3, False, True, (FALSE, BreachReason.SUFFICIENT_READY_PODS)),
        # 2. the was-available gate comes before the rolling update check
        (2, False, False, (FALSE, BreachReason.NEVER_AVAILABLE)),
        (0, False, True, (FALSE, BreachReason.NEVER_AVAILABLE)),
        # 3. rolling update of a previously available clique: Unknown
        (2, True, True, (UNKNOWN, BreachReason.UPDATE_IN_PROGRESS)),
        # 4. otherwise: breached
        (2, True, False, (TRUE, BreachReason.INSUFFICIENT_READY_PODS)),
        (0, True, False, (TRUE, BreachReason.INSUFFICIENT_READY_PODS)),
    ],
)
def test_condition_follows_the_seed_order(
    ready: int, was_available: bool, updating: bool, expected: tuple[ConditionStatus, BreachReason]
) -> None:
    observed = CliqueObservation(uid="u", ready=ready, scheduled=4, pods=4, update_in_progress=updating)
    condition = clique_condition(UNIT, observed, was_available)
    assert (condition.status, condition.reason) == expected
    assert condition.type == "MinAvailableBreached"
    assert condition.message.startswith(f"{ready} of 3 required pods ready")


def test_absent_podclique_is_never_available_and_not_breached() -> None:
    condition = clique_condition(UNIT, None, was_available=True)
    assert (condition.status, condition.reason) == (FALSE, BreachReason.NEVER_AVAILABLE)


def test_only_ready_pods_count_towards_availability() -> None:
    starting = CliqueObservation(uid="u", ready=2, scheduled=4, pods=4)
    assert not reaches_availability(UNIT, starting)
    assert clique_condition(UNIT, starting, was_available=True).status is TRUE


def test_was_available_is_not_set_during_a_rolling_update() -> None:
    assert reaches_availability(UNIT, CliqueObservation(uid="u", ready=3))
    assert not reaches_availability(UNIT, CliqueObservation(uid="u", ready=4, update_in_progress=True))


# --- WasAvailable over time -------------------------------------------------------------------------------------


def test_startup_below_min_available_is_never_a_breach() -> None:
    replica = Replica(build_topology())
    for t in (0, 100, 10_000):
        evaluation = replica.observe(t, ready={"frontend": 1})
        assert status(evaluation, "frontend") == (FALSE, BreachReason.NEVER_AVAILABLE)
        assert not evaluation.cliques["p-0-frontend"].was_available
        assert evaluation.deadlines == () and evaluation.terminations == ()


def test_was_available_is_sticky_through_degradation_and_recovery() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    degraded = replica.observe(10, ready={"frontend": 1})
    assert status(degraded, "frontend") == (TRUE, BreachReason.INSUFFICIENT_READY_PODS)
    recovered = replica.observe(20)
    assert status(recovered, "frontend") == (FALSE, BreachReason.SUFFICIENT_READY_PODS)
    again = replica.observe(25, ready={"frontend": 0})
    assert status(again, "frontend") == (TRUE, BreachReason.INSUFFICIENT_READY_PODS)
    assert again.cliques["p-0-frontend"].was_available
    assert again.cliques["p-0-frontend"].breach_start == at(25), "a healed breach restarts its clock"


def test_rolling_update_reports_unknown_and_stops_the_clock() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    during = replica.observe(10, ready={"frontend": 1}, updating=("frontend",))
    assert status(during, "frontend") == (UNKNOWN, BreachReason.UPDATE_IN_PROGRESS)
    assert during.deadlines == ()
    after = replica.observe(100, ready={"frontend": 1})
    assert status(after, "frontend") == (TRUE, BreachReason.INSUFFICIENT_READY_PODS)
    assert after.cliques["p-0-frontend"].breach_start == at(100)
    assert after.terminations == ()


def test_readiness_reached_only_during_a_rolling_update_does_not_count_as_available() -> None:
    replica = Replica(build_topology())
    replica.observe(0, ready={"frontend": 0})
    replica.observe(10, updating=("frontend",))
    evaluation = replica.observe(20, ready={"frontend": 1})
    assert status(evaluation, "frontend") == (FALSE, BreachReason.NEVER_AVAILABLE)


def test_recreated_podclique_is_a_new_incarnation() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    replica.uids["p-0-frontend"] = "uid-new"
    evaluation = replica.observe(10, ready={"frontend": 0})
    assert status(evaluation, "frontend") == (FALSE, BreachReason.NEVER_AVAILABLE)
    assert "p-0-frontend" not in evaluation.memory.was_available


def test_momentarily_absent_podclique_is_not_breached_and_keeps_its_incarnation() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    gone = replica.observe(10, absent=("frontend",))
    assert status(gone, "frontend") == (FALSE, BreachReason.NEVER_AVAILABLE)
    assert not gone.cliques["p-0-frontend"].present
    back = replica.observe(20, ready={"frontend": 1})
    assert status(back, "frontend") == (TRUE, BreachReason.INSUFFICIENT_READY_PODS)


# --- breach clocks ------------------------------------------------------------------------------------------------


def test_breach_begins_at_the_transition_and_a_changed_message_does_not_restart_it() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    first = replica.observe(5, ready={"frontend": 1})
    later = replica.observe(10, ready={"frontend": 0})
    assert first.cliques["p-0-frontend"].condition.message != later.cliques["p-0-frontend"].condition.message
    assert later.cliques["p-0-frontend"].breach_start == at(5)
    assert later.deadlines[0].due_at == at(35)


def test_healed_breach_cancels_its_deadline() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    assert replica.observe(5, ready={"frontend": 1}).next_deadline == at(35)
    healed = replica.observe(20)
    assert healed.deadlines == () and healed.next_deadline is None
    # the timer set for 35 fires; fresh state shows nothing breached: nothing is terminated
    assert replica.observe(35).terminations == ()
    rebreached = replica.observe(50, ready={"frontend": 1})
    assert rebreached.next_deadline == at(80)


def test_termination_is_never_early_and_due_exactly_at_the_deadline() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1})
    early = replica.observe(32.999999, ready={"frontend": 1})
    assert early.terminations == ()
    assert early.next_deadline == at(33)
    due = replica.observe(33, ready={"frontend": 1})
    assert [t.scope for t in due.terminations] == [Scope.PCS_REPLICA]
    assert due.deadlines == ()


# --- gang termination disabled -------------------------------------------------------------------------------------


def test_unset_termination_delay_disables_termination_but_conditions_are_still_computed() -> None:
    replica = Replica(build_topology(delay=None))
    replica.observe(0)
    for t in (5, 3600, 86_400):
        evaluation = replica.observe(t, ready={"frontend": 0, "sg-0-worker": 0, "sg-1-worker": 0})
        assert status(evaluation, "frontend") == (TRUE, BreachReason.INSUFFICIENT_READY_PODS)
        assert evaluation.scaling_groups["p-0-sg"].condition.status is TRUE
        assert evaluation.deadlines == () and evaluation.terminations == ()


# --- PCS replica scope -----------------------------------------------------------------------------------------------


def test_standalone_breach_terminates_the_whole_replica_healthy_podcliques_too() -> None:
    topology = build_topology()
    replica = Replica(topology)
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1})
    (termination,) = replica.observe(33, ready={"frontend": 1}).terminations
    assert termination.scope is Scope.PCS_REPLICA
    assert termination.scaling_group is None and termination.scaling_group_replica is None
    assert termination.cliques == tuple(c.name for c in topology.cliques)
    assert termination.targets == ("p-0-frontend",)
    assert (termination.breach_start, termination.delay, termination.deadline) == (at(3), secs(30), at(33))
    assert termination.reason == (
        "Gang-terminating PodCliqueSet p replica 0 (all 7 PodCliques): PodClique p-0-frontend had 1 of 2 "
        "required pods ready since 2025-06-01T12:00:03Z; terminationDelay 30s expired at 2025-06-01T12:00:33Z"
    )


def test_standalone_podcliques_use_the_pcs_delay_even_when_a_pcsg_overrides_it() -> None:
    replica = Replica(build_topology(delay=30, sg_delay=5))
    replica.observe(0)
    evaluation = replica.observe(10, ready={"frontend": 1})
    assert [(d.target, d.delay, d.due_at) for d in evaluation.deadlines] == [
        ("p-0-frontend", secs(30), at(40))
    ]


def test_pcsg_breached_as_a_whole_delegates_to_the_pcs_replica() -> None:
    replica = Replica(build_topology(sg_replicas=3, sg_min_available=2))
    replica.observe(0)
    broken = {"sg-0-worker": 1, "sg-1-leader": 0}
    evaluation = replica.observe(3, ready=broken)
    group = evaluation.scaling_groups["p-0-sg"]
    assert (group.condition.status, group.condition.reason) == (TRUE, BreachReason.INSUFFICIENT_PCSG_REPLICAS)
    assert (group.healthy_replicas, group.available_replicas, group.breached_replicas) == (1, 1, (0, 1))
    assert [(d.scope, d.target, d.due_at) for d in evaluation.deadlines] == [
        (Scope.PCS_REPLICA, "p-0-sg", at(33))
    ]
    (termination,) = replica.observe(33, ready=broken).terminations
    assert termination.scope is Scope.PCS_REPLICA
    assert termination.targets == ("p-0-sg",)
    assert termination.breached_cliques == ("p-0-sg-0-worker", "p-0-sg-1-leader")
    assert "PodCliqueScalingGroup p-0-sg had 1 of 2 required replicas healthy since" in termination.reason


def test_pcsg_whole_breach_clock_starts_when_the_pcsg_breaches_and_uses_the_override() -> None:
    replica = Replica(build_topology(delay=30, sg_delay=20, sg_replicas=3, sg_min_available=2))
    replica.observe(0)
    first = replica.observe(3, ready={"sg-0-worker": 0})
    assert [(d.scope, d.due_at) for d in first.deadlines] == [(Scope.PCSG_REPLICA, at(23))]
    both = replica.observe(10, ready={"sg-0-worker": 0, "sg-1-worker": 0})
    assert [(d.scope, d.target, d.due_at) for d in both.deadlines] == [(Scope.PCS_REPLICA, "p-0-sg", at(30))]
    # the PCSG replica 0 clock expired at 23 but the PCSG as a whole is breached: the PCS level decides
    assert replica.observe(23, ready={"sg-0-worker": 0, "sg-1-worker": 0}).terminations == ()
    (termination,) = replica.observe(30, ready={"sg-0-worker": 0, "sg-1-worker": 0}).terminations
    assert (termination.scope, termination.breach_start, termination.delay) == (
        Scope.PCS_REPLICA,
        at(10),
        secs(20),
    )


def test_pcs_replica_termination_supersedes_pcsg_replica_terminations_due_at_the_same_time() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1, "sg-2-worker": 0})
    (termination,) = replica.observe(40, ready={"frontend": 1, "sg-2-worker": 0}).terminations
    assert termination.scope is Scope.PCS_REPLICA
    assert termination.targets == ("p-0-frontend",)
    assert "p-0-sg-2-worker" in termination.cliques


# --- PCSG replica scope ----------------------------------------------------------------------------------------------


def test_pcsg_replica_is_breached_when_any_of_its_podcliques_is() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    evaluation = replica.observe(3, ready={"sg-1-leader": 0})
    group = evaluation.scaling_groups["p-0-sg"]
    assert group.breached_replicas == (1,)
    assert (group.healthy_replicas, group.available_replicas) == (2, 2)
    assert group.condition.status is FALSE


def test_pcsg_replica_is_terminated_alone_while_the_pcsg_is_not_breached() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    pending = replica.observe(3, ready={"sg-1-worker": 1})
    (deadline,) = pending.deadlines
    assert (deadline.scope, deadline.target, deadline.scaling_group, deadline.scaling_group_replica) == (
        Scope.PCSG_REPLICA,
        "p-0-sg-1",
        "p-0-sg",
        1,
    )
    (termination,) = replica.observe(33, ready={"sg-1-worker": 1}).terminations
    assert (termination.scope, termination.scaling_group, termination.scaling_group_replica) == (
        Scope.PCSG_REPLICA,
        "p-0-sg",
        1,
    )
    assert termination.cliques == ("p-0-sg-1-leader", "p-0-sg-1-worker")
    assert termination.reason.startswith(
        "Gang-terminating PodCliqueScalingGroup p-0-sg replica 1 (p-0-sg-1-leader, p-0-sg-1-worker): "
        "PodClique p-0-sg-1-worker had 1 of 2 required pods ready since 2025-06-01T12:00:03Z; "
        "terminationDelay 30s expired at 2025-06-01T12:00:33Z"
    )


def test_several_pcsg_replicas_expiring_together_are_each_terminated() -> None:
    replica = Replica(build_topology(sg_replicas=3, sg_min_available=1))
    replica.observe(0)
    broken = {"sg-2-leader": 0, "sg-0-worker": 1}
    replica.observe(3, ready=broken)
    terminations = replica.observe(40, ready=broken).terminations
    assert [(t.scope, t.scaling_group_replica) for t in terminations] == [
        (Scope.PCSG_REPLICA, 0),
        (Scope.PCSG_REPLICA, 2),
    ]
    for termination in terminations:
        replica.carry_out(termination)
    assert (
        replica.observe(41, absent=("sg-0-leader", "sg-0-worker", "sg-2-leader", "sg-2-worker")).deadlines
        == ()
    )


def test_pcsg_override_sets_the_pcsg_replica_delay() -> None:
    replica = Replica(build_topology(delay=30, sg_delay=10))
    replica.observe(0)
    replica.observe(3, ready={"sg-0-leader": 0})
    assert replica.observe(12.9, ready={"sg-0-leader": 0}).terminations == ()
    (termination,) = replica.observe(13, ready={"sg-0-leader": 0}).terminations
    assert (termination.scope, termination.delay) == (Scope.PCSG_REPLICA, secs(10))


def test_pcsg_replica_breach_starts_at_its_earliest_breached_podclique() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    replica.observe(5, ready={"sg-1-leader": 0})
    evaluation = replica.observe(12, ready={"sg-1-leader": 0, "sg-1-worker": 0})
    (deadline,) = evaluation.deadlines
    assert (deadline.breach_start, deadline.due_at) == (at(5), at(35))
    assert deadline.breached_cliques == ("p-0-sg-1-leader", "p-0-sg-1-worker")
    assert "(also breached: p-0-sg-1-worker)" in deadline.cause


def test_the_shortest_wait_across_constituents_is_the_next_deadline() -> None:
    replica = Replica(build_topology(delay=30, sg_delay=60))
    replica.observe(0)
    evaluation = replica.observe(10, ready={"frontend": 1, "sg-0-worker": 0})
    assert [(d.target, d.due_at) for d in evaluation.deadlines] == [
        ("p-0-frontend", at(40)),
        ("p-0-sg-0", at(70)),
    ]
    assert evaluation.next_deadline == at(40)


def test_never_available_podclique_in_a_pcsg_replica_never_starts_a_clock() -> None:
    replica = Replica(build_topology())
    replica.observe(0, ready={"sg-2-worker": 1})
    evaluation = replica.observe(1000, ready={"sg-2-worker": 0})
    assert evaluation.scaling_groups["p-0-sg"].breached_replicas == ()
    assert evaluation.deadlines == () and evaluation.terminations == ()


def test_replica_being_recreated_counts_as_healthy_but_not_available() -> None:
    replica = Replica(build_topology(sg_replicas=3, sg_min_available=3))
    replica.observe(0)
    evaluation = replica.observe(5, absent=("sg-2-leader", "sg-2-worker"))
    group = evaluation.scaling_groups["p-0-sg"]
    assert (group.healthy_replicas, group.available_replicas) == (3, 2)
    assert group.condition.status is FALSE
    assert not evaluation.replica_available


def test_replica_availability() -> None:
    replica = Replica(build_topology(sg_replicas=3, sg_min_available=2))
    assert replica.observe(0).replica_available
    assert replica.observe(1, ready={"sg-0-worker": 0}).replica_available
    assert not replica.observe(2, ready={"sg-0-worker": 0, "sg-1-worker": 0}).replica_available
    assert not replica.observe(3, ready={"frontend": 1}).replica_available


# --- after a termination ---------------------------------------------------------------------------------------------


def test_one_expired_breach_causes_one_termination_even_if_the_read_lags() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1})
    (termination,) = replica.observe(33, ready={"frontend": 1}).terminations
    stale_uids = dict(replica.uids)
    replica.carry_out(termination)
    assert replica.memory.was_available == {} and replica.memory.clique_breach_starts == {}
    # a lagging read still shows the deleted objects, first breached, then healthy, then breached again
    replica.uids = stale_uids
    for t, ready in ((34, {"frontend": 1}), (40, {}), (100, {"frontend": 1})):
        evaluation = replica.observe(t, ready=ready)
        assert evaluation.terminations == () and evaluation.deadlines == ()
        assert status(evaluation, "frontend") == (FALSE, BreachReason.NEVER_AVAILABLE)


def test_recreated_replica_starts_a_new_incarnation_and_can_breach_again() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1})
    (termination,) = replica.observe(33, ready={"frontend": 1}).terminations
    replica.carry_out(termination)
    starting = replica.observe(34, ready={"frontend": 0, "sg-0-worker": 0})
    assert not starting.cliques["p-0-frontend"].was_available and starting.deadlines == ()
    replica.observe(60)
    (second,) = [*replica.observe(70, ready={"frontend": 1}).deadlines]
    assert second.breach_start == at(70)
    assert replica.observe(100, ready={"frontend": 1}).terminations[0].breach_start == at(70)


def test_forgetting_a_pcsg_replica_leaves_other_clocks_running() -> None:
    replica = Replica(build_topology(delay=30, sg_delay=10))
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1, "sg-1-worker": 0})
    (termination,) = replica.observe(13, ready={"frontend": 1, "sg-1-worker": 0}).terminations
    assert termination.scope is Scope.PCSG_REPLICA
    replica.carry_out(termination)
    assert replica.memory.clique_breach_starts == {"p-0-frontend": at(3)}
    assert "p-0-sg-1-worker" not in replica.memory.was_available
    assert "p-0-sg-0-worker" in replica.memory.was_available
    evaluation = replica.observe(14, ready={"frontend": 1}, absent=("sg-1-leader", "sg-1-worker"))
    assert [d.target for d in evaluation.deadlines] == ["p-0-frontend"]


# --- contract ---------------------------------------------------------------------------------------------------


def test_evaluation_and_memory_survive_a_json_round_trip() -> None:
    replica = Replica(build_topology(sg_delay=10))
    replica.observe(0)
    replica.observe(3, ready={"frontend": 1, "sg-1-worker": 0, "sg-2-leader": 0})
    evaluation = replica.observe(13.5, ready={"frontend": 1, "sg-1-worker": 0, "sg-2-leader": 0})
    assert evaluation.terminations and evaluation.deadlines
    assert ReplicaEvaluation.model_validate_json(evaluation.model_dump_json()) == evaluation
    assert ReplicaMemory.model_validate_json(evaluation.memory.model_dump_json()) == evaluation.memory


def test_evaluation_does_not_mutate_its_inputs() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    before = replica.memory.model_copy(deep=True)
    replica.observe(5, ready={"frontend": 1})
    assert before.clique_breach_starts == {}
    assert replica.memory.clique_breach_starts == {"p-0-frontend": at(5)}


def test_naive_now_is_rejected() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        evaluate_replica(build_topology(), ReplicaObservation(), ReplicaMemory(), datetime(2025, 6, 1, 12))


def test_now_in_another_timezone_is_normalised_to_utc() -> None:
    replica = Replica(build_topology())
    replica.observe(0)
    local = at(5).astimezone(timezone(timedelta(hours=2)))
    evaluation = evaluate_replica(
        replica.topology,
        ReplicaObservation(cliques={"p-0-frontend": CliqueObservation(uid="uid-p-0-frontend", ready=1)}),
        replica.memory,
        local,
    )
    assert evaluation.cliques["p-0-frontend"].breach_start == at(5)
    assert evaluation.cliques["p-0-frontend"].breach_start.utcoffset() == timedelta(0)


# --- deciding a termination again on a later read (terminate_gang's recheck) ----------------------------------------

def _due_pcsg_termination(replica: Replica) -> Termination:
    """sg replica 1's worker short from t=0; its PCSG-replica termination due at t=30."""
    replica.observe(0)
    replica.observe(1, ready={"sg-1-worker": 1})
    (termination,) = replica.observe(31, ready={"sg-1-worker": 1}).terminations
    assert termination.scope is Scope.PCSG_REPLICA and termination.scaling_group_replica == 1
    return termination


def _observed(replica: Replica, ready: dict[str, int], uids: dict[str, str] | None = None) -> ReplicaObservation:
    ready = {f"p-0-{k}": v for k, v in ready.items()}
    return ReplicaObservation(cliques={
        c.name: CliqueObservation(uid=(uids or {}).get(c.name, replica.uids[c.name]), ready=ready.get(c.name, c.replicas),
                                  scheduled=c.replicas, pods=c.replicas)
        for c in replica.topology.cliques})


def test_a_later_read_that_still_shows_the_breach_keeps_the_termination_due() -> None:
    replica = Replica(build_topology())
    termination = _due_pcsg_termination(replica)
    later = _observed(replica, {"sg-1-worker": 1})
    assert still_due(replica.topology, later, replica.memory, termination.deadline, termination.cliques)


def test_a_later_read_that_shows_the_breach_healed_or_the_podclique_replaced_does_not() -> None:
    replica = Replica(build_topology())
    termination = _due_pcsg_termination(replica)
    healed = _observed(replica, {})
    assert not still_due(replica.topology, healed, replica.memory, termination.deadline, termination.cliques)
    replaced = _observed(replica, {"sg-1-worker": 1}, uids={"p-0-sg-1-worker": "another incarnation"})
    assert not still_due(replica.topology, replaced, replica.memory, termination.deadline, termination.cliques)


def test_a_larger_termination_due_on_the_later_read_still_covers_the_smaller_one() -> None:
    """The PCS replica breached as a whole (the frontend short past its delay) while a PCSG replica's termination
    waited: deleting the whole replica includes it, so the smaller one is still due."""
    replica = Replica(build_topology())
    replica.observe(0)
    replica.observe(1, ready={"sg-1-worker": 1, "frontend": 1})
    (termination,) = replica.observe(31, ready={"sg-1-worker": 1, "frontend": 1}).terminations
    assert termination.scope is Scope.PCS_REPLICA
    pcsg_only = Termination(scope=Scope.PCSG_REPLICA, scaling_group="p-0-sg", scaling_group_replica=1,
                            cliques=("p-0-sg-1-leader", "p-0-sg-1-worker"), breach_start=at(1), delay=secs(30),
                            deadline=at(31), reason="sg-1 short")
    later = _observed(replica, {"sg-1-worker": 1, "frontend": 1})
    assert still_due(replica.topology, later, replica.memory, pcsg_only.deadline, pcsg_only.cliques)


def test_a_breach_seen_again_after_a_termination_found_healed_starts_a_new_clock() -> None:
    """The activity saw the breach healed and deleted nothing; the workflow's next read shows it short again (it
    flapped). forget_healed stops the old clock, as a read showing the heal would have: not due at once."""
    replica = Replica(build_topology())
    termination = _due_pcsg_termination(replica)
    replica.memory = forget_healed(replica.memory, termination)
    assert replica.memory.was_available == {c.name: replica.uids[c.name] for c in replica.topology.cliques}
    evaluation = replica.observe(32, ready={"sg-1-worker": 1})
    assert not evaluation.terminations
    assert evaluation.next_deadline == at(62), "a new breach from t=32, due a whole delay later"


def test_a_podclique_reported_at_min_available_between_two_reads_was_available() -> None:
    """The watcher saw the PodClique at minAvailable, and the Ready was lost before a read showed it: the first time
    it reached minAvailable still sets the sticky bit, so the loss is a breach. Only for the incarnation the read
    shows, outside a rolling update, and never for one we gang-terminated; a PodClique the read does not show yet is
    kept for a later read."""
    def seen(uid: str, ready: int = 1, updating: bool = False) -> CliqueObservation:
        return CliqueObservation(uid=uid, ready=ready, scheduled=2, pods=2, update_in_progress=updating)

    topology = ReplicaTopology(pcs="p", replica=0, termination_delay=secs(30), cliques=(
        CliqueUnit(name="p-0-a", clique="a", replicas=2, min_available=2),))
    short = ReplicaObservation(cliques={"p-0-a": seen("uid-1")})
    before = evaluate_replica(topology, short, ReplicaMemory(), at(0))
    assert before.cliques["p-0-a"].condition.reason is BreachReason.NEVER_AVAILABLE

    memory, left = remember_reached(ReplicaMemory(), short, {"p-0-a": "uid-1", "p-0-b": "uid-9"})
    assert memory.was_available == {"p-0-a": "uid-1"} and left == {"p-0-b": "uid-9"}
    after = evaluate_replica(topology, short, memory, at(1))
    assert after.cliques["p-0-a"].condition.status is TRUE
    assert after.next_deadline == at(31)

    for observed, memory_before, why in (
            (short, ReplicaMemory(), "another incarnation's report"),
            (ReplicaObservation(cliques={"p-0-a": seen("uid-0", updating=True)}), ReplicaMemory(),
             "a rolling update's Ready sets no was-available bit"),
            (ReplicaObservation(cliques={"p-0-a": seen("uid-0")}), ReplicaMemory(terminated={"p-0-a": "uid-0"}),
             "an incarnation we gang-terminated"),
    ):
        memory, left = remember_reached(memory_before, observed, {"p-0-a": "uid-0"})
        assert memory == memory_before and left == {}, why
