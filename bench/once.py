"""Did every action happen once? The scale-out benchmark's check, from the workflow histories, the objects a watch
saw and the Kubernetes Events, whichever worker ran each step.

- Gate release: no pod incarnation (UID) is named as released by two completed activities (release_gates or
  ensure_replica_releasing for a base gang, local or not), and every pod incarnation the watch saw ungated was released
  by one.
- Termination: one completed terminate_gang per breach (target and breach start), and as many as the breaches made.
- Recreate: each PodClique and pod name has exactly one incarnation more than the terminations that deleted it.
- Events: GatesReleased Events never outnumber the releases, GangTerminated Events equal the terminations.

Pure: the caller reads the histories, the watch and the Events; `tests/bench/test_once.py` covers the rules.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent

from worker.history_activities import decoded, local_activity
from workflows.contract import ENSURE_REPLICA_RELEASING, RELEASE_GATES, TERMINATE_GANG
from workflows.messages import EnsureResult, ReleaseRequest, ReleaseResult, TerminateRequest

JSON = dict[str, Any]


@dataclass
class Actions:
    """What the histories say was done, summed over every run read."""

    released: Counter[str] = field(default_factory=Counter)  # pod UID -> completed releases naming it
    release_activities: int = 0  # completed activities that released at least one pod
    terminations: Counter[tuple[str, str, str | None, int | None, datetime | None]] = field(default_factory=Counter)
    terminated_cliques: Counter[str] = field(default_factory=Counter)  # PodClique name -> terminations naming it
    by_worker: Counter[str] = field(default_factory=Counter)  # activity attempts started, per worker identity

    def add_run(self, workflow_id: str, events: Iterable[HistoryEvent]) -> None:
        scheduled: dict[int, HistoryEvent] = {}
        for event in events:
            kind = event.event_type
            local = local_activity(event)
            if local is not None and local.name == RELEASE_GATES and local.result is not None:
                # a release as a local activity: its marker holds the result only, which names each pod's UID
                self._count_release(decoded(local.result, ReleaseResult).released_uids)
            elif local is not None and local.name == ENSURE_REPLICA_RELEASING and local.result is not None:
                self._count_release(decoded(local.result, EnsureResult).released_base)  # materialised locally
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[event.event_id] = event
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                self.by_worker[event.activity_task_started_event_attributes.identity or "?"] += 1
            elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                done = event.activity_task_completed_event_attributes
                origin = scheduled.get(done.scheduled_event_id)
                if origin is None:
                    continue
                attrs = origin.activity_task_scheduled_event_attributes
                name = attrs.activity_type.name
                if name == RELEASE_GATES:
                    request: ReleaseRequest = decoded(attrs.input, ReleaseRequest)
                    result: ReleaseResult = decoded(done.result, ReleaseResult)
                    self._count_release({pod: request.pods.get(pod, f"{pod}?") for pod in result.released})
                elif name == ENSURE_REPLICA_RELEASING:
                    self._count_release(decoded(done.result, EnsureResult).released_base)
                elif name == TERMINATE_GANG:
                    terminate: TerminateRequest = decoded(attrs.input, TerminateRequest)
                    self.terminations[(workflow_id, terminate.scope.value, terminate.scaling_group,
                                       terminate.scaling_group_replica, terminate.breach_start)] += 1
                    for clique in terminate.cliques:
                        self.terminated_cliques[clique] += 1

    def _count_release(self, released: dict[str, str]) -> None:
        """One completed release: pod name -> UID of each pod it released."""
        for uid in released.values():
            self.released[uid] += 1
        self.release_activities += bool(released)


@dataclass
class Verdict:
    counts: dict[str, int]
    duplicates: list[str]  # one line per action done more (or less) than once

    @property
    def none(self) -> bool:
        return not self.duplicates


def _event_total(events: Iterable[JSON], reason: str) -> int:
    return sum(int(e.get("count") or 1) for e in events if e.get("reason") == reason)


def judge(actions: Actions, *, breaches: int, pod_incarnations: dict[tuple[str, str], list[str]],
          pclq_incarnations: dict[str, list[str]], ungated_pods: Iterable[str], events: Iterable[JSON],
          limit: int = 20) -> Verdict:
    """`pclq_incarnations`: PodClique name -> the UIDs the watch saw under that name; `pod_incarnations`: (its
    PodClique, pod name) -> the same; `ungated_pods`: the pod UIDs it saw lose the gate; `events`: the namespace's
    Kubernetes Events."""
    events = list(events)
    found: list[str] = []
    for uid, times in sorted(actions.released.items()):
        if times > 1:
            found.append(f"pod {uid}: released by {times} activities")
    for uid in sorted(set(ungated_pods) - set(actions.released)):
        found.append(f"pod {uid}: lost the gate, but no activity released it")
    for key, times in sorted(actions.terminations.items(), key=str):
        if times > 1:
            found.append(f"{key[0]}: breach {key[1:]} terminated {times} times")
    done = sum(actions.terminations.values())
    if done != breaches:
        found.append(f"{done} terminations for {breaches} breaches")
    named: list[tuple[str, str, str, list[str]]] = [("PodClique", name, name, uids)
                                                    for name, uids in pclq_incarnations.items()]
    named += [("pod", name, clique, uids) for (clique, name), uids in pod_incarnations.items()]
    for kind, name, clique, uids in sorted(named):
        expected = 1 + actions.terminated_cliques.get(clique, 0)
        if len(set(uids)) != expected:
            found.append(f"{kind} {name}: {len(set(uids))} incarnations, expected {expected} "
                         f"(1 + {expected - 1} terminations)")
    gates_events = _event_total(events, "GatesReleased")
    if gates_events > actions.release_activities:
        found.append(f"{gates_events} GatesReleased Events for {actions.release_activities} releases")
    terminated_events = _event_total(events, "GangTerminated")
    if terminated_events != done:
        found.append(f"{terminated_events} GangTerminated Events for {done} terminations")
    counts = {
        "pods_released": len(actions.released),
        "release_activities": actions.release_activities,
        "terminations": done,
        "pclq_incarnations": sum(len(set(u)) for u in pclq_incarnations.values()),
        "pod_incarnations": sum(len(set(u)) for u in pod_incarnations.values()),
        "gates_released_events": gates_events,
        "gang_terminated_events": terminated_events,
    }
    extra = len(found) - limit
    return Verdict(counts, found[:limit] + ([f"... and {extra} more"] if extra > 0 else []))
