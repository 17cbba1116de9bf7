"""The replica workflow's deterministic helpers, as pure logic: the nudge protocol (workflows/nudges.py), the control
queue (workflows/controls.py) and the search attribute mirror (workflows/presentation.py). The workflow around them
is proven by the middle tier (test_replica_workflow.py) and the replay/compat histories."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from grove.termination import Scope, Termination
from workflows.contract import GROVE_PAUSED, GROVE_PHASE
from workflows.controls import ControlQueue
from workflows.messages import (
    DeadlineMemo,
    DeadlineStatus,
    ForceTerminateRequest,
    Nudge,
    PcsState,
    Phase,
    ReplicaSnapshot,
    TerminationRecord,
)
from workflows.nudges import Nudges
from workflows.presentation import SearchAttributeMirror, deadline_memo_update

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _snapshot(read_from: datetime | None) -> ReplicaSnapshot:
    return ReplicaSnapshot(read_at=T0, read_from=read_from, pcs_state=PcsState.PRESENT)


def test_a_timed_nudge_calls_for_a_round_only_if_sent_at_or_after_the_observation_in_force_began() -> None:
    nudges = Nudges()
    nudges.timed, nudges.look_again = True, False
    nudges.observed(_snapshot(T0 + timedelta(seconds=10)), None)
    nudges.received(Nudge(sent_at=T0 + timedelta(seconds=5)))  # the observation saw it
    assert not nudges.pending() and not nudges.due()
    nudges.received(Nudge(sent_at=T0 + timedelta(seconds=10)))
    assert nudges.pending() and nudges.due()
    nudges.received(Nudge(sent_at=T0 + timedelta(seconds=1)))  # an older one never moves the mark back
    assert nudges.sent_at == T0 + timedelta(seconds=10)
    nudges.observed(_snapshot(T0 + timedelta(seconds=11)), None)
    assert not nudges.due()
    nudges.observed(_snapshot(T0), None)  # an older observation never moves the mark back either
    assert nudges.observed_from == T0 + timedelta(seconds=11)


def test_an_untimed_nudge_or_a_run_without_the_patch_always_looks_again() -> None:
    nudges = Nudges()
    nudges.timed, nudges.look_again = True, False
    nudges.received(None)
    assert nudges.due()
    old = Nudges()
    old.look_again = False  # timed stays False: a history recorded before TIMED_NUDGES_PATCH
    old.received(Nudge(sent_at=T0))
    assert old.look_again and old.sent_at is None


def _read(read_from: datetime, **versions: int) -> ReplicaSnapshot:
    return ReplicaSnapshot(read_at=T0, read_from=read_from, pcs_state=PcsState.PRESENT, read_versions=versions)


def test_a_versioned_nudge_is_judged_by_resource_versions_whatever_the_clocks_say() -> None:
    """The watcher's clock an hour behind the activity worker's: by the clock every nudge looks covered; by the
    versions only those the read already saw are."""
    nudges = Nudges()
    nudges.timed, nudges.versioned, nudges.look_again = True, True, False
    nudges.observed(_read(T0 + timedelta(hours=1), Pod=100, PodClique=90), None)
    behind = T0  # the watcher's clock
    nudges.received(Nudge(sent_at=behind, versions={"Pod": 100}))  # the read saw this event
    assert not nudges.due()
    nudges.received(Nudge(sent_at=behind, versions={"Pod": 101}))  # it did not see this one
    assert nudges.due()
    nudges.observed(_read(T0 + timedelta(hours=1, seconds=1), Pod=105, PodClique=90), None)
    assert not nudges.due()
    nudges.received(Nudge(sent_at=T0 + timedelta(hours=2), versions={"PodClique": 90}))  # ahead, but seen
    assert not nudges.due()


def test_a_nudge_of_a_kind_the_observation_could_not_read_is_not_waited_on() -> None:
    nudges = Nudges()
    nudges.timed, nudges.versioned, nudges.look_again = True, True, False
    nudges.received(Nudge(sent_at=T0, versions={"Pod": 7, "PodCliqueSet": 3}))
    assert nudges.due()
    nudges.observed(_read(T0, PodCliqueSet=3), None)  # the PodCliqueSet was read, its pods were not (listable)
    assert not nudges.due() and nudges.versions == {"PodCliqueSet": 3}


def test_versions_are_ignored_where_the_run_predates_them() -> None:
    nudges = Nudges()
    nudges.timed, nudges.look_again = True, False  # versioned stays False: a run started before the patch
    nudges.observed(_read(T0 + timedelta(seconds=10), Pod=100), None)
    nudges.received(Nudge(sent_at=T0, versions={"Pod": 200}))
    assert not nudges.due(), "the clock decides, as it did before"
    assert nudges.versions == {}


def _cached(**versions: int) -> ReplicaSnapshot:
    return ReplicaSnapshot(read_at=T0, read_from=T0, pcs_state=PcsState.PRESENT, read_versions=versions,
                           from_cache=True)


def test_a_read_from_a_watch_cache_is_never_older_than_an_earlier_one() -> None:
    """Caches of different workers lag by different amounts: a read from one must reach what a read from another
    already saw, or the workflow would see objects come back and wait for nudges already spent."""
    nudges = Nudges()
    nudges.timed, nudges.versioned, nudges.look_again = True, True, False
    nudges.observed(_cached(Pod=100, PodClique=90), None)
    assert nudges.cache_at_least() == {"Pod": 100, "PodClique": 90}
    nudges.received(Nudge(sent_at=T0, versions={"Pod": 120}))
    assert nudges.cache_at_least() == {"Pod": 120, "PodClique": 90}
    nudges.observed(_read(T0, Pod=5000, PodClique=5000), None)  # from the apiserver: a LIST's version sets no floor
    assert nudges.cache_at_least() == {"Pod": 100, "PodClique": 90}, "a run begun before NUDGED_FLOOR_PATCH"
    assert nudges.unread_versions() == {}, "the old protocol's at_least, kept for what it still serves"


def test_a_read_from_a_watch_cache_is_never_older_than_a_nudge_an_earlier_read_answered() -> None:
    """Fault run seed 14 on b82dc7c, round 42: nudges for Pod 17554 and 17560 (a worker pod turned NotReady) were
    answered by a read from the apiserver (Pod 17571): a breach, and a 0.9 s timer. When it fired, the next read
    came from the other worker's cache, cut off from kube-apiserver at Pod 17444: the pod Ready again, the breach
    healed, and no termination. Every nudged version now bounds reads from a cache, answered or not."""
    nudges = Nudges()
    nudges.timed, nudges.versioned, nudges.nudged_floor, nudges.look_again = True, True, True, False
    nudges.observed(_cached(Pod=17335, PodClique=17344), None)
    nudges.received(Nudge(sent_at=T0, versions={"Pod": 17554}))
    nudges.received(Nudge(sent_at=T0, versions={"Pod": 17560}))
    nudges.observed(_read(T0, Pod=17571, PodClique=17571), None)  # the apiserver answers both nudges
    assert not nudges.due() and nudges.unread_versions() == {}
    assert nudges.cache_at_least() == {"Pod": 17560, "PodClique": 17344}, "a cache at Pod 17444 must refuse"
    assert nudges.carry().floor == {"Pod": 17560, "PodClique": 17344}, "and so must the next run's first read"
    nudges.observed(_cached(Pod=17600, PodClique=17350), None)
    assert nudges.cache_at_least() == {"Pod": 17600, "PodClique": 17350}


def test_continue_as_new_hands_unread_nudges_and_the_floor_to_the_next_run() -> None:
    """Fault run seed 13, round 23: a run handed over with nudges (Pod 10446, PodClique 10450) unread; the next run
    read a cache still at PodClique 10414, saw the gang-terminated PodCliques still there, and waited for nudges the
    watcher had already sent."""
    old = Nudges()
    old.timed, old.versioned, old.look_again = True, True, False
    old.observed(_cached(Pod=10409, PodClique=10414), None)
    old.received(Nudge(sent_at=T0, versions={"Pod": 10446}))
    old.received(Nudge(sent_at=T0, versions={"PodClique": 10450}))
    carried = old.carry()
    assert (carried.unread, carried.floor, carried.fresh) == (
        {"Pod": 10446, "PodClique": 10450}, {"Pod": 10409, "PodClique": 10414}, False)

    new = Nudges()
    new.timed, new.versioned = True, True
    assert new.resume(carried) is False
    assert new.cache_at_least() == {"Pod": 10446, "PodClique": 10450}, "a cache at 10414 must refuse the read"
    new.look_again = False
    assert new.due()
    new.observed(_cached(Pod=10446, PodClique=10450), None)
    assert not new.due()

    clocked = Nudges()
    clocked.timed = True
    clocked.received(Nudge(sent_at=T0))  # no versions: only a read from the apiserver answers it
    assert Nudges().resume(clocked.carry()) is True, "the next run's first read is from the apiserver"


def test_a_nudge_without_versions_is_answered_by_a_read_from_the_apiserver_scheduled_after_it_whatever_its_stamp(
) -> None:
    """Fault run seed 14 on 3f8d58c, round 42: the watcher, its clock 30 s behind, relisted after an apiserver outage
    and nudged for a PodClique scaled 2 -> 3 -> 2 meanwhile (a relisted item has no event version). Its stamp fell
    before the other worker's last read began, so the nudge was taken as seen and the surplus pod stayed 3.5 min.
    Under UNVERSIONED_COUNTED_PATCH no stamp is compared: the nudge asks for a round from the apiserver."""
    nudges = Nudges()
    nudges.decide_timed(lambda patch: True)
    assert nudges.counted
    nudges.look_again = False
    nudges.observed(_read(T0 + timedelta(seconds=30), Pod=100), T0 + timedelta(seconds=30), nudges.reading())
    nudges.received(Nudge(sent_at=T0))  # stamped by a clock 30 s behind: before the read in force began
    assert nudges.due() and nudges.fresh_needed(), "a round, and not from a watch cache"
    nudges.look_again = False  # the round begins
    nudges.observed(_cached(Pod=200), None, nudges.reading())
    assert nudges.fresh_needed(), "a read from a cache says nothing of what changed"
    in_flight = nudges.reading()  # a read from the apiserver scheduled, and another nudge arrives while it runs
    nudges.received(None)
    nudges.observed(_read(T0, Pod=210), T0, in_flight)
    assert nudges.due() and nudges.fresh_needed(), "that read may have begun before the second change"
    assert nudges.carry().fresh, "and a run handing over now makes the next one read the apiserver first"
    nudges.look_again = False
    nudges.observed(_read(T0, Pod=220), T0, nudges.reading())
    assert not nudges.due() and not nudges.fresh_needed()
    nudges.received(Nudge(sent_at=T0, versions={"Pod": 150}))  # versioned nudges keep their path: already read
    assert not nudges.due()

    older = Nudges()
    older.decide_timed(lambda patch: patch != "unversioned-nudges-counted")  # a run begun under baseline 4
    older.look_again = False
    older.observed(_read(T0 + timedelta(seconds=30), Pod=100), T0 + timedelta(seconds=30), older.reading())
    older.received(Nudge(sent_at=T0))
    assert not older.due(), "judged by the clock, as that run's history recorded it"


def test_observed_falls_back_to_when_the_observe_was_scheduled() -> None:
    nudges = Nudges()
    nudges.observed(_snapshot(None), T0)
    assert nudges.observed_from == T0
    nudges.observed(_snapshot(None), None)
    assert nudges.observed_from == T0


def _termination(reason: str) -> Termination:
    return Termination(scope=Scope.PCS_REPLICA, cliques=("p-0-a",), reason=reason, forced=True, deadline=T0,
                       breach_start=None, delay=None)


def test_the_control_queue_rejects_requests_that_no_longer_make_sense_and_answers_each_ticket() -> None:
    queue = ControlQueue()
    bad = queue.enqueue(ForceTerminateRequest(reason="bad", scaling_group="gone"))
    good = queue.enqueue(ForceTerminateRequest(reason="good"))
    later = queue.enqueue(ForceTerminateRequest(reason="later"))
    assert queue.queued() and queue.tickets == 3

    def plan(request: ForceTerminateRequest) -> Termination:
        if request.scaling_group:
            raise ValueError(f"scaling_group {request.scaling_group!r} does not exist")
        return _termination(request.reason)

    assert queue.next_forced(plan) == _termination("good")
    assert queue.results.pop(bad).message == "scaling_group 'gone' does not exist"
    assert list(queue.rejected) == ["force_terminate: scaling_group 'gone' does not exist"]
    record = TerminationRecord(incarnation=1, at=T0, scope=Scope.PCS_REPLICA, cliques=("p-0-a",), reason="good",
                               forced=True, deadline=T0)
    queue.carried_out("pcs-replica", record)
    assert queue.results[good].accepted and queue.results[good].termination == record
    queue.reject_all("the replica workflow has completed")
    assert not queue.queued()
    answer = queue.results[later]
    assert not answer.accepted and answer.message == "the replica workflow has completed"


def test_the_search_attribute_mirror_writes_only_changes() -> None:
    mirror = SearchAttributeMirror()
    first = mirror.updates(Phase.CREATING, False)
    assert [(u.key.name, u.value) for u in first] == [(GROVE_PHASE.name, "Creating"), (GROVE_PAUSED.name, False)]
    assert mirror.updates(Phase.CREATING, False) == []
    assert [(u.key.name, u.value) for u in mirror.updates(Phase.CREATING, True)] == [(GROVE_PAUSED.name, True)]



def _deadline(due_in: int) -> DeadlineStatus:
    return DeadlineStatus(scope=Scope.PCS_REPLICA, target="p-0", breach_start=T0, delay=timedelta(seconds=60),
                          due_at=T0 + timedelta(seconds=due_in), cause="frontend below minAvailable")


def test_the_deadline_memo_is_written_when_the_deadlines_change_and_never_for_a_replica_that_never_had_one() -> None:
    assert deadline_memo_update(None, (), Phase.AVAILABLE) is None, "most replicas never breach: no event for them"
    first = deadline_memo_update(None, (_deadline(60), _deadline(30)), Phase.BREACHED)
    assert first == DeadlineMemo(count=2, next_due=T0 + timedelta(seconds=30)), "how many, and the earliest"
    assert deadline_memo_update(first, (_deadline(30), _deadline(60)), Phase.BREACHED) is None, "unchanged: nothing"
    healed = deadline_memo_update(first, (), Phase.AVAILABLE)
    assert healed == DeadlineMemo(count=0, next_due=None), "cleared once written, whatever the phase"
    assert deadline_memo_update(healed, (), Phase.AVAILABLE) is None
    # Breached without a deadline (terminationDelay 0, or held): the memo says none, so the gauges need not ask.
    assert deadline_memo_update(None, (), Phase.BREACHED) == DeadlineMemo(count=0, next_due=None)
