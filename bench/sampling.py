"""Before/after readings of a worker process: CPU, memory, /metrics counters, Temporal history lengths."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.service import RPCError

from activities.metrics import NUDGE_TIMINGS
from bench import procs, promtext
from bench.promtext import KUBE_REQUESTS, NUDGE_REQUESTS, NUDGES, OBSERVE_READS, Counters
from bench.stats import summary
from localstack.workerproc import WorkerProcess
from worker.history_activities import event_kinds, heartbeat_tasks, idle_tasks, read_only_tasks, task_waits
from workflows.contract import OBSERVE_REPLICA, OBSERVE_REPLICA_CACHED

T = TypeVar("T")

# Requests that happen on their own clock whatever the replicas do: leader-election renewals and open watches.
BACKGROUND_RESOURCES = ("leases",)
BACKGROUND_VERBS = ("watch",)


@dataclass
class Reading:
    at: float
    cpu_seconds: float
    rss_bytes: int
    peak_rss_bytes: int
    counters: Counters

    @staticmethod
    def take(worker: WorkerProcess) -> Reading:
        proc = procs.sample(worker.pid)
        return Reading(time.time(), proc.cpu_seconds, proc.rss_bytes, proc.peak_rss_bytes,
                       promtext.scrape(worker.http_port))


@dataclass
class Delta:
    seconds: float
    cpu_seconds: float
    counters: Counters

    @staticmethod
    def between(before: Reading, after: Reading) -> Delta:
        return Delta(after.at - before.at, after.cpu_seconds - before.cpu_seconds, after.counters - before.counters)

    def requests(self, *, foreground_only: bool = False) -> float:
        total = self.counters.total(KUBE_REQUESTS)
        if foreground_only:
            total -= self.background_requests()
        return total

    def background_requests(self) -> float:
        by = self.counters.by(KUBE_REQUESTS, "verb", "resource")
        return sum(v for key, v in by.items()
                   if key.split("/")[0] in BACKGROUND_VERBS or key.split("/", 1)[1] in BACKGROUND_RESOURCES)

    def requests_by_verb(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.counters.by(KUBE_REQUESTS, "verb").items()}

    def requests_by_verb_resource(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.counters.by(KUBE_REQUESTS, "verb", "resource").items()}

    def nudges_per_replica(self, replicas: int) -> dict[str, float]:
        """The watcher's nudges per replica: signals sent, and the changes it was asked to nudge for by when they
        went (at once; held for the status window; a held one let go at its window's end)."""
        counts = {"sent": self.counters.total(NUDGES, outcome="sent"),
                  **{f"{timing.replace('-', '_')}_requests": self.counters.total(NUDGE_REQUESTS, timing=timing)
                     for timing in NUDGE_TIMINGS}}
        return {name: round(count / replicas, 2) for name, count in counts.items()}

    def observe_reads(self) -> dict[str, int]:
        """Routine replica reads by where they were served: `cache`, or `apiserver` where the cache could not."""
        return {k: int(v) for k, v in self.counters.by(OBSERVE_READS, "source").items()}


def foreground(counters: Counters) -> float:
    return Delta(0, 0, counters).requests(foreground_only=True)


async def wait_quiet(worker: WorkerProcess, quiet_seconds: float = 5.0, timeout: float = 600.0) -> float:
    """Until the worker has issued no Kubernetes request other than lease renewals and watches for
    `quiet_seconds`: whatever the last change set off is finished. Returns when that quiet began."""
    began = time.monotonic()
    last = foreground(await asyncio.to_thread(promtext.scrape, worker.http_port))
    last_change = time.time()
    while time.monotonic() - began < timeout:
        await asyncio.sleep(0.5)
        now = foreground(await asyncio.to_thread(promtext.scrape, worker.http_port))
        if now != last:
            last, last_change = now, time.time()
        elif time.time() - last_change >= quiet_seconds:
            return last_change
    raise TimeoutError(f"the worker never went quiet within {timeout:.0f}s")


async def _each(workflow_ids: Iterable[str], fetch: Callable[[str], Awaitable[T]], concurrency: int) -> dict[str, T]:
    """`fetch` of each workflow, `concurrency` at a time; workflows it fails for (an RPCError) are left out."""
    semaphore = asyncio.Semaphore(concurrency)
    found: dict[str, T] = {}

    async def one(workflow_id: str) -> None:
        async with semaphore:
            with contextlib.suppress(RPCError):
                found[workflow_id] = await fetch(workflow_id)

    await asyncio.gather(*(one(w) for w in workflow_ids))
    return found


async def _describe_all(client: Client, workflow_ids: Iterable[str],
                        concurrency: int) -> dict[str, WorkflowExecutionDescription]:
    """Each workflow's description (its current run); workflows that cannot be described are left out."""
    return await _each(workflow_ids, lambda w: client.get_workflow_handle(w).describe(), concurrency)


def _handed_over(described: WorkflowExecutionDescription) -> bool:
    first_run = described.raw_description.workflow_execution_info.first_run_id
    return bool(first_run) and first_run != described.run_id


async def history_lengths(client: Client, workflow_ids: Iterable[str], concurrency: int = 16) -> dict[str, int]:
    """Each workflow's history events over all its runs (a replica hands over by continue-as-new)."""
    described = await _describe_all(client, workflow_ids, concurrency)
    found = {workflow_id: d.history_length for workflow_id, d in described.items()}
    semaphore = asyncio.Semaphore(concurrency)

    async def add_earlier_runs(workflow_id: str, current_run_id: str) -> None:
        async with semaphore:
            with contextlib.suppress(RPCError):
                async for run in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
                    if run.run_id != current_run_id:
                        found[workflow_id] += run.history_length

    await asyncio.gather(*(add_earlier_runs(w, d.run_id) for w, d in described.items() if _handed_over(d)))
    return found


@dataclass(frozen=True)
class CurrentRun:
    events: int  # its history length: what a worker that starts cold replays
    handed_over: bool  # a later run than the first: the workflow continued-as-new since it started


async def current_runs(client: Client, workflow_ids: Iterable[str], concurrency: int = 16) -> dict[str, CurrentRun]:
    """Each workflow's current run, from one description per workflow."""
    return {workflow_id: CurrentRun(described.history_length, _handed_over(described))
            for workflow_id, described in (await _describe_all(client, workflow_ids, concurrency)).items()}


def sample_histories(histories: Mapping[str, list[HistoryEvent]], sample: int = 20) -> list[list[HistoryEvent]]:
    """The histories of the first `sample` workflows (sorted by id) among those read, for a look inside them."""
    return [histories[workflow_id] for workflow_id in sorted(histories)[:sample]]


def history_kinds(histories: list[list[HistoryEvent]]) -> dict[str, float]:
    """Where the history events go: the mean count per replica of each kind of event
    (worker/history_activities.py, event_kinds), largest first."""
    totals: Counter[str] = Counter()
    for events in histories:
        totals.update(event_kinds(events))
    return {kind: round(count / len(histories), 2) for kind, count in totals.most_common()} if histories else {}


def idle_tasks_per_replica(histories: list[list[HistoryEvent]]) -> float:
    """How many workflow tasks per replica did nothing (worker/history_activities.py, idle_tasks): mostly nudges
    for a change the replica's last read had already seen."""
    return round(sum(idle_tasks(events) for events in histories) / len(histories), 2) if histories else 0.0


def read_only_tasks_per_replica(histories: list[list[HistoryEvent]]) -> float:
    """How many workflow tasks per replica only read (worker/history_activities.py, read_only_tasks): mostly held
    status-only nudges whose window ended before the replica's last pod was Ready."""
    reads = frozenset({OBSERVE_REPLICA, OBSERVE_REPLICA_CACHED})
    return round(sum(read_only_tasks(events, reads) for events in histories) / len(histories), 2) if histories else 0.0


def queue_waits(histories: list[list[HistoryEvent]]) -> dict[str, Any]:
    """How long the replicas' workflow tasks waited in Temporal's task queues (worker/history_activities.py,
    task_waits): all of them, and apart those scheduled again on the shared queue after waiting out a sticky
    queue's timeout, which wait there behind every task queued before them (under a creation wave, the new
    replicas' first tasks)."""
    waits = [wait for events in histories for wait in task_waits(events)]
    again = [w.seconds for w in waits if w.after_sticky_timeout]
    return {"all_s": summary([w.seconds for w in waits], 3), "after_sticky_timeout_s": summary(again, 3),
            "sticky_timeouts_per_replica": round(len(again) / len(histories), 2) if histories else 0.0}


async def histories_of(client: Client, workflow_ids: Iterable[str], concurrency: int = 16) -> dict[str, list[HistoryEvent]]:
    """The current run's history of each workflow (those that cannot be read are left out)."""
    async def events(workflow_id: str) -> list[HistoryEvent]:
        return list((await client.get_workflow_handle(workflow_id).fetch_history()).events)

    return await _each(workflow_ids, events, concurrency)


def task_kinds(histories: Iterable[list[HistoryEvent]]) -> dict[str, float]:
    """Per replica (the mean over `histories`): its workflow tasks, and of them the heartbeats (a local activity
    that ran past 80% of the task timeout), the read-only rounds, the idle ones that were not heartbeats, and those
    that waited out a sticky queue's timeout first; and the signals it was sent."""
    reads = frozenset({OBSERVE_REPLICA, OBSERVE_REPLICA_CACHED})
    totals: Counter[str] = Counter()
    count = 0
    for events in histories:
        count += 1
        beats = heartbeat_tasks(events)
        totals.update({
            "workflow_tasks": sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED),
            "heartbeat_tasks": beats,
            "read_only_tasks": read_only_tasks(events, reads),
            "idle_tasks_not_heartbeats": idle_tasks(events) - beats,
            "after_sticky_timeout": sum(1 for wait in task_waits(events) if wait.after_sticky_timeout),
            "signals": sum(1 for e in events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED),
        })
    # Counter.update keeps a key it adds 0 to, in the order first added: every kind above, once.
    return {kind: round(total / count, 2) for kind, total in totals.items()} if count else {}


def over_target(lengths: dict[str, int], histories: dict[str, list[HistoryEvent]], target: int) -> dict[str, Any]:
    """Every replica's tasks (task_kinds), and apart those of the replicas whose history is longer than `target`:
    what the tail's extra events were spent on. Read from the current runs of all replicas, not a sample: a
    sample of the first 20 by name misses a creation burst's tail."""
    tail = [histories[w] for w, length in lengths.items() if length > target and w in histories]
    return {"target": target, "replicas_read": len(histories), "all_replicas": task_kinds(histories.values()),
            "replicas_over": len(tail), "over": task_kinds(tail),
            "replicas_with_heartbeats": sum(1 for events in histories.values() if heartbeat_tasks(events))}
