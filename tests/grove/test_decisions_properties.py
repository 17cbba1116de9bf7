"""Property tests of the decisions over random replica topologies and random observation timelines.

A timeline is run like the workflow runs it: evaluate, keep the returned memory, carry out every termination and
keep `forget_terminated`'s memory. The checks compare the decisions with facts recomputed from the raw timeline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from grove.availability import CliqueObservation, ConditionStatus
from grove.evaluate import (
    ReplicaEvaluation,
    ReplicaMemory,
    ReplicaObservation,
    evaluate_replica,
    forget_terminated,
)
from grove.termination import Scope
from grove.topology import CliqueUnit, ReplicaTopology, ScalingGroupUnit

T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
DELAYS = st.integers(1, 90).map(lambda s: timedelta(seconds=s))

# Evaluations build pydantic models; keep hypothesis from flagging slow examples on a busy machine.
PROPERTY = settings(deadline=None, max_examples=100)
Timeline = tuple[ReplicaTopology, list[tuple[timedelta, ReplicaObservation]]]


@st.composite
def topologies(draw: st.DrawFn, delay: st.SearchStrategy[timedelta | None] | None = None) -> ReplicaTopology:
    """PCS delay from `delay` (default: always set; the unset case has its own property)."""
    replica = draw(st.integers(0, 2))
    prefix = f"p-{replica}"
    pcs_delay = draw(delay if delay is not None else DELAYS)
    cliques: list[CliqueUnit] = []
    for k in range(draw(st.integers(0, 3))):
        replicas = draw(st.integers(1, 4))
        cliques.append(
            CliqueUnit(
                name=f"{prefix}-c{k}",
                clique=f"c{k}",
                replicas=replicas,
                min_available=draw(st.integers(1, replicas)),
            )
        )
    groups: list[ScalingGroupUnit] = []
    for g in range(draw(st.integers(0 if cliques else 1, 2))):
        name = f"{prefix}-sg{g}"
        replicas = draw(st.integers(1, 4))
        sizes = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(1, 2)))]
        templates = [(f"m{k}", size, draw(st.integers(1, size))) for k, size in enumerate(sizes)]
        for j in range(replicas):
            for clique, size, min_available in templates:
                cliques.append(
                    CliqueUnit(
                        name=f"{name}-{j}-{clique}",
                        clique=clique,
                        replicas=size,
                        min_available=min_available,
                        scaling_group=name,
                        scaling_group_replica=j,
                    )
                )
        groups.append(
            ScalingGroupUnit(
                name=name,
                config_name=f"sg{g}",
                replicas=replicas,
                # often 1, so PCSG replicas can be terminated alone without the PCSG breaching as a whole
                min_available=draw(st.just(1) | st.integers(1, replicas)),
                termination_delay=draw(st.none() | DELAYS) if pcs_delay is not None else None,
            )
        )
    return ReplicaTopology(
        pcs="p",
        replica=replica,
        cliques=tuple(cliques),
        scaling_groups=tuple(groups),
        termination_delay=pcs_delay,
    )


@st.composite
def clique_observations(draw: st.DrawFn, unit: CliqueUnit) -> CliqueObservation | None:
    """None is absent (not yet created, or being recreated); 'u2' is a recreated incarnation."""
    presence = draw(st.integers(0, 19))
    if presence == 0:
        return None
    return CliqueObservation(
        uid="u2" if presence == 1 else "u1",
        # healthy, just below the threshold, or anything
        ready=draw(st.sampled_from((unit.replicas, unit.min_available - 1)) | st.integers(0, unit.replicas)),
        pods=unit.replicas,
        update_in_progress=draw(st.integers(0, 9)) == 0,
    )


@st.composite
def timelines(draw: st.DrawFn, delay: st.SearchStrategy[timedelta | None] | None = None) -> Timeline:
    """A topology and (time advance, observation) steps: all healthy, then each step changes a few PodCliques and
    leaves the others as they were, so breaches last long enough for their delays to expire."""
    topology = draw(topologies(delay))
    # start mostly healthy: breaches need PodCliques that were available first
    current: dict[str, CliqueObservation | None] = {
        unit.name: CliqueObservation(uid="u1", ready=unit.replicas, pods=unit.replicas)
        for unit in topology.cliques
    }
    steps: list[tuple[timedelta, ReplicaObservation]] = []
    for _ in range(draw(st.integers(1, 16))):
        for unit in draw(st.lists(st.sampled_from(topology.cliques), max_size=3)):
            current[unit.name] = draw(clique_observations(unit))
        observed = ReplicaObservation(cliques={k: v for k, v in current.items() if v is not None})
        advance = timedelta(
            seconds=draw(st.integers(0, 60)), milliseconds=draw(st.sampled_from((0, 1, 500, 999)))
        )
        steps.append((advance or timedelta(milliseconds=1), observed))
    return topology, steps


@dataclass(frozen=True)
class Step:
    now: datetime
    observed: ReplicaObservation
    memory: ReplicaMemory
    evaluation: ReplicaEvaluation


def run(topology: ReplicaTopology, steps: list[tuple[timedelta, ReplicaObservation]]) -> list[Step]:
    memory, now, history = ReplicaMemory(), T0, []
    for advance, observed in steps:
        now += advance
        evaluation = evaluate_replica(topology, observed, memory, now)
        history.append(Step(now, observed, memory, evaluation))
        memory = evaluation.memory
        for termination in evaluation.terminations:
            memory = forget_terminated(memory, termination)
    return history


def terminated_after(history: list[Step], index: int, clique: str) -> bool:
    return any(clique in t.cliques for t in history[index].evaluation.terminations)


@PROPERTY
@given(timelines())
def test_never_a_termination_before_its_deadline(timeline: Timeline) -> None:
    for step in run(*timeline):
        for termination in step.evaluation.terminations:
            assert termination.deadline <= step.now
            for cause in termination.causes:
                assert cause.due_at == cause.breach_start + cause.delay <= step.now
        for deadline in step.evaluation.deadlines:
            assert deadline.due_at == deadline.breach_start + deadline.delay > step.now
        pending = [d.due_at for d in step.evaluation.deadlines]
        assert step.evaluation.next_deadline == (min(pending) if pending else None)


@PROPERTY
@given(timelines())
def test_deadlines_follow_the_breach_clocks_and_the_effective_delays(timeline: Timeline) -> None:
    """PCS delay for standalone PodCliques, the PCSG override (else the PCS delay) for PCSGs and their replicas; a
    PCSG replica's clock is its earliest breached PodClique's."""
    topology = timeline[0]
    for step in run(*timeline):
        evaluation = step.evaluation
        for deadline in (*evaluation.deadlines, *(c for t in evaluation.terminations for c in t.causes)):
            if deadline.scope is Scope.PCSG_REPLICA:
                assert deadline.scaling_group is not None and deadline.scaling_group_replica is not None
                members = topology.members(deadline.scaling_group, deadline.scaling_group_replica)
                starts = {
                    c.name: start
                    for c in members
                    if (start := evaluation.cliques[c.name].breach_start) is not None
                }
                assert sorted(deadline.breached_cliques) == sorted(starts)
                assert deadline.breach_start == min(starts.values())
                assert deadline.delay == topology.effective_delay(deadline.scaling_group)
            elif deadline.target in evaluation.scaling_groups:
                assert deadline.breach_start == evaluation.scaling_groups[deadline.target].breach_start
                assert deadline.delay == topology.effective_delay(deadline.target)
            else:
                assert topology.clique(deadline.target).scaling_group is None
                assert deadline.breach_start == evaluation.cliques[deadline.target].breach_start
                assert deadline.delay == topology.termination_delay


@PROPERTY
@given(timelines(delay=st.none()))
def test_never_a_termination_or_deadline_with_the_delay_unset(timeline: Timeline) -> None:
    for step in run(*timeline):
        assert step.evaluation.terminations == () and step.evaluation.deadlines == ()


@PROPERTY
@given(timelines())
def test_never_pcsg_replica_scope_while_that_pcsg_is_breached_as_a_whole(timeline: Timeline) -> None:
    for step in run(*timeline):
        breached_groups = {
            name
            for name, g in step.evaluation.scaling_groups.items()
            if g.condition.status is ConditionStatus.TRUE
        }
        for termination in step.evaluation.terminations:
            if termination.scope is Scope.PCSG_REPLICA:
                assert termination.scaling_group not in breached_groups
        for deadline in step.evaluation.deadlines:  # suspended, not merely postponed
            if deadline.scope is Scope.PCSG_REPLICA:
                assert deadline.scaling_group not in breached_groups


@PROPERTY
@given(timelines())
def test_never_for_a_podclique_that_never_was_available(timeline: Timeline) -> None:
    """Every PodClique blamed for a termination reached minAvailable, outside a rolling update, in its current
    incarnation (same UID, not since deleted by a termination) at some earlier or current step."""
    history = run(*timeline)
    for index, step in enumerate(history):
        for termination in step.evaluation.terminations:
            for name in termination.breached_cliques:
                uid = step.observed.cliques[name].uid
                unit = next(c for c in timeline[0].cliques if c.name == name)
                since = max((k + 1 for k in range(index) if terminated_after(history, k, name)), default=0)
                assert any(
                    (seen := history[k].observed.cliques.get(name)) is not None
                    and seen.uid == uid
                    and seen.ready >= unit.min_available
                    and not seen.update_in_progress
                    for k in range(since, index + 1)
                )


@PROPERTY
@given(timelines())
def test_breach_clocks_start_at_the_transition_and_a_healed_breach_cancels_its_deadline(
    timeline: Timeline,
) -> None:
    """A breach start is the time of the first step of the current unbroken run of True conditions, and every
    deadline or termination is backed by PodCliques breached right now."""
    clique_run: dict[str, datetime] = {}
    group_run: dict[str, datetime] = {}
    for step in run(*timeline):
        evaluation = step.evaluation
        for name, health in evaluation.cliques.items():
            if health.condition.status is ConditionStatus.TRUE:
                clique_run.setdefault(name, step.now)
                assert health.breach_start == clique_run[name]
            else:
                clique_run.pop(name, None)
                assert health.breach_start is None
        for name, group in evaluation.scaling_groups.items():
            if group.condition.status is ConditionStatus.TRUE:
                group_run.setdefault(name, step.now)
                assert group.breach_start == group_run[name]
            else:
                group_run.pop(name, None)
                assert group.breach_start is None
        for item in (*evaluation.deadlines, *(c for t in evaluation.terminations for c in t.causes)):
            assert item.breached_cliques
            for name in item.breached_cliques:
                assert evaluation.cliques[name].condition.status is ConditionStatus.TRUE
        for termination in evaluation.terminations:  # carried out: its clocks stop
            for name in termination.cliques:
                clique_run.pop(name, None)
            if termination.scope is Scope.PCS_REPLICA:
                group_run.clear()


@PROPERTY
@given(timelines())
def test_exactly_one_termination_per_expired_breach(timeline: Timeline) -> None:
    acted_on: set[tuple[Scope, str, datetime]] = set()
    for step in run(*timeline):
        terminations = step.evaluation.terminations
        if any(t.scope is Scope.PCS_REPLICA for t in terminations):
            assert len(terminations) == 1, "a PCS-replica termination supersedes every other one"
        for termination in terminations:
            assert termination.causes
            for cause in termination.causes:
                key = (cause.scope, cause.target, cause.breach_start)
                assert key not in acted_on
                acted_on.add(key)


@PROPERTY
@given(timelines())
def test_terminations_delete_exactly_their_scope(timeline: Timeline) -> None:
    topology = timeline[0]
    for step in run(*timeline):
        for termination in step.evaluation.terminations:
            if termination.scope is Scope.PCS_REPLICA:
                assert termination.cliques == tuple(c.name for c in topology.cliques)
            else:
                assert termination.scaling_group is not None and termination.scaling_group_replica is not None
                members = topology.members(termination.scaling_group, termination.scaling_group_replica)
                assert termination.cliques == tuple(c.name for c in members)


@PROPERTY
@given(timelines())
def test_evaluation_is_deterministic_and_survives_serialisation(timeline: Timeline) -> None:
    topology = timeline[0]
    for step in run(*timeline):
        again = evaluate_replica(topology, step.observed, step.memory, step.now)
        assert again == step.evaluation
        assert again.model_dump_json() == step.evaluation.model_dump_json()
        thawed = evaluate_replica(
            ReplicaTopology.model_validate_json(topology.model_dump_json()),
            ReplicaObservation.model_validate_json(step.observed.model_dump_json()),
            ReplicaMemory.model_validate_json(step.memory.model_dump_json()),
            step.now,
        )
        assert thawed.model_dump_json() == step.evaluation.model_dump_json()


@PROPERTY
@given(timelines())
def test_conditions_do_not_depend_on_the_termination_delay(timeline: Timeline) -> None:
    topology = timeline[0]
    disabled = topology.model_copy(
        update={
            "termination_delay": None,
            "scaling_groups": tuple(
                g.model_copy(update={"termination_delay": None}) for g in topology.scaling_groups
            ),
        }
    )
    for step in run(*timeline):
        off = evaluate_replica(disabled, step.observed, step.memory, step.now)
        assert off.cliques == step.evaluation.cliques
        assert off.scaling_groups == step.evaluation.scaling_groups
        assert off.replica_available == step.evaluation.replica_available


def test_the_timelines_reach_the_interesting_cases() -> None:
    """Guards the properties above against a generator that drifted into never terminating anything."""
    seen: Counter[str] = Counter()

    @settings(max_examples=150, deadline=None, database=None, derandomize=True)
    @given(timelines())
    def explore(timeline: Timeline) -> None:
        for step in run(*timeline):
            for termination in step.evaluation.terminations:
                via_pcsg = termination.targets[0] in step.evaluation.scaling_groups
                seen[f"{termination.scope} via PCSG" if via_pcsg else str(termination.scope)] += 1

    explore()
    assert {"pcsg-replica", "pcs-replica", "pcs-replica via PCSG"} <= set(seen), seen


@PROPERTY
@given(timelines(), st.integers(-120, 120))
def test_with_due_by_a_deadline_is_judged_by_it_and_breaches_are_stamped_by_now(
        timeline: Timeline, shift: int) -> None:
    """The replica workflow judges deadlines by the latest one a durable timer fired for (`due_by`), and stamps new
    breaches with workflow time (`now`): the judgement is due_by's alone, whatever `now` is."""
    topology, _ = timeline
    for step in run(*timeline):
        due_by = step.now + timedelta(seconds=shift)
        judged = evaluate_replica(topology, step.observed, step.memory, step.now, due_by)
        assert judged.memory == step.evaluation.memory, "breaches are stamped with now, as without due_by"
        assert all(t.deadline <= due_by for t in judged.terminations)
        assert all(d.due_at > due_by for d in judged.deadlines)
        if shift == 0:
            assert judged == step.evaluation
