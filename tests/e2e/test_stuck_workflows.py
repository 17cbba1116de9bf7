"""Stuck workflows heal. A deliberately broken worker build (tests/e2e/broken_workflow.py) runs a replica for a while;
once the real build is back, the history no longer replays and every workflow task of that replica fails. The
worker reports it (metric, /readyz detail, log), `grove-temporal doctor` lists it with the failing event, and
`grove-temporal reset` resets it to its last good workflow task: the replica continues, with the signals it
received while stuck reapplied. A build that fails by itself (raises) is reported too, and `reset` refuses it,
changing nothing: a reset cannot help there, a good build does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import Client

from tests.e2e.broken_build import BUILD_ENV
from tests.e2e.broken_workflow import EXTRA_TIMER_SUMMARY, RAISED
from tests.e2e.conftest import Histories
from tests.e2e.harness import (
    Cluster,
    Replica,
    WorkerProcess,
    await_for,
    clique,
    http_get,
    pcs_manifest,
    wait_for,
)
from workflows.contract import NUDGE_SIGNAL, PAUSE
from workflows.messages import Nudge, PauseRequest, Phase

if TYPE_CHECKING:
    from localstack.stack import LocalStack

CHECK_EVERY = ["--stuck-check-seconds", "2"]


def cli(*args: str, address: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address}
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], capture_output=True, text=True, env=env,
                          timeout=120)


@pytest.fixture
def workers(stack: LocalStack, namespace: str, crds: list[str], request: pytest.FixtureRequest
            ) -> Iterator[dict[str, WorkerProcess]]:
    """The real build and two broken ones, on the same task queue; each test starts and stops them in turn."""
    log_dir = Path(stack.run_dir) / "test-workers"
    log_dir.mkdir(parents=True, exist_ok=True)

    def make(build: str | None) -> WorkerProcess:
        return WorkerProcess(kubeconfig=Path(stack.kubeconfig), temporal_address=stack.temporal_address,
                             namespace=namespace, log_dir=log_dir / (build or "real"), extra_args=CHECK_EVERY,
                             module="tests.e2e.broken_build" if build else "worker.cli",
                             extra_env={BUILD_ENV: build} if build else {})

    for build in ("real", "extra-timer", "raise"):
        (log_dir / build).mkdir(parents=True, exist_ok=True)
    procs = {"real": make(None), "extra-timer": make("extra-timer"), "raise": make("raise")}
    try:
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            for name, proc in procs.items():
                print(f"--- {name} worker log ---\n{proc.logs()[-8000:]}")


def _metric(port: int, name: str) -> float | None:
    code, body = http_get(port, "/metrics")
    if code != 200:
        return None
    values = [float(line.split()[-1]) for line in body.splitlines() if line.startswith(name + " ")]
    return values[0] if values else None


def _doctor(address: str, namespace: str) -> list[dict[str, object]]:
    out = cli("doctor", "-n", namespace, "-o", "json", address=address)
    assert out.returncode == 0, out.stderr
    found: list[dict[str, object]] = json.loads(out.stdout)
    return found


async def test_a_replica_stuck_after_a_rolled_back_build_is_reported_reset_and_continues(
        cluster: Cluster, workers: dict[str, WorkerProcess], temporal_client: Client, histories: Histories) -> None:
    address, ns = workers["real"].temporal_address, cluster.namespace
    real = workers["real"].start()
    cluster.apply(pcs_manifest("heal", ns, termination_delay="600s", cliques=[clique("app", 2, 2)]))
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")
    replica = Replica(temporal_client, cluster, "heal")
    await replica.wait_phase(Phase.AVAILABLE, timeout=60)
    assert _doctor(address, ns) == []

    # --- the broken build takes over for a while and writes history the real build cannot replay ---
    real.stop()
    broken = workers["extra-timer"].start()
    await replica.handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))

    async def extra_timer_written() -> bool:
        """The extra timer, fired: a history the real build cannot replay. Its wait starts no timer of its own (one
        safety-resync timer runs across waits), so it meets a TimerStarted it never issues."""
        events = (await replica.handle.fetch_history()).events
        extra = {e.event_id for e in events if e.event_type == EventType.EVENT_TYPE_TIMER_STARTED
                 and EXTRA_TIMER_SUMMARY.encode() in e.user_metadata.SerializeToString()}
        return any(e.event_type == EventType.EVENT_TYPE_TIMER_FIRED
                   and e.timer_fired_event_attributes.started_event_id in extra for e in events)

    await await_for(extra_timer_written, timeout=60, interval=0.5, what="the broken build's extra timer in history")
    broken.stop()

    # --- the real build is back: every workflow task of this replica fails ---
    real = workers["real"].start()
    await replica.handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
    stuck_seen = datetime.now(UTC)
    wait_for(lambda: _metric(real.http_port, "grove_temporal_stuck_workflows") == 1.0, timeout=120,
             what="the stuck-workflows gauge at 1")
    code, ready = http_get(real.http_port, "/readyz")
    assert code == 200, "a stuck workflow does not take the worker out of service"
    assert replica.workflow_id in json.loads(ready)["stuckWorkflows"], ready
    assert f"replica workflow {replica.workflow_id} is stuck" in real.logs()
    (listed,) = _doctor(address, ns)
    assert listed["workflowId"] == replica.workflow_id and listed["cause"] == "NON_DETERMINISTIC_ERROR", listed
    assert int(str(listed["attempts"])) >= 3 and "TimerStarted" in str(listed["failingEvent"]), listed
    table = cli("doctor", "-n", ns, address=address)
    assert table.returncode == 0 and replica.workflow_id in table.stdout and "Nondeterminism" in table.stdout

    # a control sent while stuck: reapplied to the new run by the reset
    await replica.handle.signal(PAUSE, PauseRequest(reason="sent while stuck"))
    dry = cli("reset", "heal", "-n", ns, "--replica", "0", "--dry-run", "-o", "json", address=address)
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)
    # At least the nudge sent once the real build was back. The pause may not be in the history yet: Temporal records
    # a signal that comes while a workflow task is started once that task ends, and the failing task is retried over
    # and over. Whether the pause reaches the new run is checked there, below. (A restarted worker's first-list nudge
    # used to make this count 2 or more; the worker's nudge watermark now leaves an unchanged replica alone.)
    assert planned["newRunId"] is None and planned["reappliedSignals"] >= 1, planned
    assert planned["signalsMayBeHeld"] is True, "the plan says its count may miss signals held back meanwhile"
    text = cli("reset", "heal", "-n", ns, "--replica", "0", "--dry-run", address=address)
    assert text.returncode == 0 and "Temporal holds those back" in text.stdout, text.stdout
    stuck_run = (await replica.handle.describe()).run_id
    assert planned["oldRunId"] == stuck_run

    done = cli("reset", "heal", "-n", ns, "--replica", "0", "--reason", "rolled back the broken build",
               "-o", "json", address=address)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome["eventId"] == planned["eventId"] and outcome["newRunId"] not in (None, stuck_run), outcome
    assert "Nondeterminism" in outcome["replayError"] and outcome["stuck"]["workflowId"] == replica.workflow_id

    # --- the replica continues: the pause sent while stuck applies, rounds run, nothing stuck any more ---
    status = await replica.wait(lambda s: s.paused, timeout=60, what="the reapplied pause")
    assert status.pause_reason == "sent while stuck"
    cluster.fail_readiness("heal-0-app-1")
    await replica.wait(lambda s: bool(s.deadlines), timeout=60, what="a breach seen after the reset")
    cluster.fail_readiness("heal-0-app-1", failing=False)
    await replica.wait(lambda s: not s.deadlines, timeout=60, what="healed")
    wait_for(lambda: _metric(real.http_port, "grove_temporal_stuck_workflows") == 0.0, timeout=60,
             what="the stuck-workflows gauge back at 0")
    assert _doctor(address, ns) == []
    history = await replica.handle.fetch_history()
    resets = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
              and e.workflow_task_failed_event_attributes.cause
              == WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW]
    assert resets and "rolled back the broken build" in resets[0].workflow_task_failed_event_attributes.failure.message
    print(f"\nstuck workflow reported {(datetime.now(UTC) - stuck_seen).total_seconds():.0f}s after the real build "
          f"came back (or less); reset to event {outcome['eventId']}, {outcome['discardedEvents']} events discarded, "
          f"{outcome['reappliedSignals']} signals reapplied")
    await histories.keep(replica.handle, "stuck_reset_then_continued")


async def test_a_build_that_fails_by_itself_is_reported_and_reset_refuses_it(
        cluster: Cluster, workers: dict[str, WorkerProcess], temporal_client: Client) -> None:
    address, ns = workers["real"].temporal_address, cluster.namespace
    real = workers["real"].start()
    cluster.apply(pcs_manifest("fails", ns, cliques=[clique("app", 1, 1)]))
    wait_for(lambda: cluster.ready_pods(1), timeout=60, what="1 Ready pod")
    replica = Replica(temporal_client, cluster, "fails")
    await replica.wait_phase(Phase.AVAILABLE, timeout=60)
    real.stop()

    broken = workers["raise"].start()
    await replica.handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
    wait_for(lambda: _metric(broken.http_port, "grove_temporal_stuck_workflows") == 1.0, timeout=120,
             what="the stuck-workflows gauge at 1")
    (listed,) = _doctor(address, ns)
    assert listed["cause"] == "WORKFLOW_WORKER_UNHANDLED_FAILURE" and RAISED in str(listed["message"]), listed
    before = (await replica.handle.describe()).run_id
    refused = cli("reset", "fails", "-n", ns, "--replica", "0", address=address)
    assert refused.returncode == 1 and "replays cleanly with this build" in refused.stderr, refused.stderr
    bad_event = cli("reset", "fails", "-n", ns, "--replica", "0", "--event-id", "1", address=address)
    assert bad_event.returncode == 1 and "--event-id 1" in bad_event.stderr, bad_event.stderr
    assert (await replica.handle.describe()).run_id == before, "nothing reset"
    broken.stop()

    fixed_at = datetime.now(UTC)
    real = workers["real"].start()  # the fix for a raising build is a good build, not a reset
    await replica.handle.signal(NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
    await replica.wait(lambda s: s.observed_at is not None and s.observed_at > fixed_at, timeout=60,
                       what="a round by the real build")
    wait_for(lambda: _doctor(address, ns) == [], timeout=60, what="no stuck workflow")

