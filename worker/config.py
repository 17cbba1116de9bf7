"""Worker configuration: one model, filled from CLI flags and GROVE_TEMPORAL_* / TEMPORAL_* environment variables."""

from __future__ import annotations

import os
import socket
from datetime import timedelta
from typing import overload

from pydantic import BaseModel, Field, SecretStr

from workflows.contract import DEFAULT_TASK_QUEUE


@overload
def _switch(variable: str, default: bool) -> bool: ...
@overload
def _switch(variable: str, default: None) -> bool | None: ...
def _switch(variable: str, default: bool | None) -> bool | None:
    """An on/off variable; unset or empty: `default`; anything but the usual spellings stops the worker in one line
    (a misspelt TEMPORAL_TLS was once taken as off: a plaintext connection to a server that wanted TLS)."""
    value = (os.environ.get(variable) or "").strip().lower()
    if not value:
        return default
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{variable} must be 1/true/yes/on or 0/false/no/off, got {os.environ.get(variable)!r}")


def _whole_number(variable: str, default: int) -> int:
    value = os.environ.get(variable)
    if value is None or value == "":
        return default
    if not value.strip().isdigit():
        raise ValueError(f"{variable} must be a whole number, got {value!r}")
    return int(value)


def _positive(variable: str, default: int) -> int:
    value = _whole_number(variable, default)
    if value < 1:
        raise ValueError(f"{variable} must be at least 1, got {value}")
    return value


def _seconds_within(variable: str, default: int, low: int, high: int) -> timedelta:
    value = _whole_number(variable, default)
    if not low <= value <= high:
        raise ValueError(f"{variable} must be between {low} and {high} seconds, got {value}")
    return timedelta(seconds=value)


def _port(variable: str) -> int | None:
    """A TCP port from the environment, None when unset; a malformed one stops the worker in one line."""
    if not os.environ.get(variable):
        return None
    port = _whole_number(variable, 0)
    if not 1 <= port <= 65535:
        raise ValueError(f"{variable} must be a port from 1 to 65535, got {port}")
    return port


class TemporalSettings(BaseModel):
    address: str = Field(default_factory=lambda: os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233"))
    namespace: str = Field(default_factory=lambda: os.environ.get("TEMPORAL_NAMESPACE", "default"))
    api_key: SecretStr | None = Field(
        default_factory=lambda: SecretStr(v) if (v := os.environ.get("TEMPORAL_API_KEY")) else None
    )
    tls: bool | None = Field(
        default_factory=lambda: _switch("TEMPORAL_TLS", None),
        description="None (unset): the SDK decides — TLS on when an API key is given, off otherwise",
    )
    tls_ca_path: str | None = Field(default_factory=lambda: os.environ.get("TEMPORAL_TLS_CA") or None)
    tls_cert_path: str | None = Field(default_factory=lambda: os.environ.get("TEMPORAL_TLS_CERT") or None)
    tls_key_path: str | None = Field(default_factory=lambda: os.environ.get("TEMPORAL_TLS_KEY") or None)
    tls_server_name: str | None = Field(default_factory=lambda: os.environ.get("TEMPORAL_TLS_SERVER_NAME") or None)


class WorkerSettings(BaseModel):
    temporal: TemporalSettings = Field(default_factory=TemporalSettings)
    kubeconfig: str | None = Field(default_factory=lambda: os.environ.get("KUBECONFIG") or None)
    task_queue: str = Field(default_factory=lambda: os.environ.get("GROVE_TEMPORAL_TASK_QUEUE", DEFAULT_TASK_QUEUE))
    watch_namespace: str | None = Field(
        default_factory=lambda: os.environ.get("GROVE_TEMPORAL_WATCH_NAMESPACE") or None,
        description="drive PodCliqueSets of this namespace only; None for all namespaces",
    )
    # hostname-pid (worker/leader.py reads it); GROVE_TEMPORAL_IDENTITY names it otherwise (B5 uses it to stand a
    # worker on "another host", where a dead holder's PID tells nothing).
    identity: str = Field(default_factory=lambda: os.environ.get("GROVE_TEMPORAL_IDENTITY")
                          or f"{socket.gethostname()}-{os.getpid()}")
    activity_threads: int = Field(default=64, ge=1, le=1024)
    # Local activities run inside a workflow task (the cached read, the status mirror, gate releases, Events), one at
    # a time per workflow, so about one per workflow-task slot; twice that leaves room for retries and the rollout
    # and reconciler workflows. They have threads of their own beside activity_threads (worker/app.py).
    local_activity_slots: int = Field(default=24, ge=1, le=1024)
    # A slot is held from the poll that fetches a workflow task until the task completes, and a replica's task now
    # runs its cached read, status mirror, gate releases and Events as local activities inside it: most of a task's
    # time is spent waiting on Temporal (the poll) or kube-apiserver, not running Python. With four slots B5 kept
    # only 2.1 of them running a task, and tasks queued in Temporal meanwhile. Measured on two cores, 1,000 replicas,
    # one run each (B3 all released / B5 all progressed after the kill): 4 slots 81.6 / 46.8 s, 8: 69.3 / 41.2 s,
    # 12: 49.8 / 37.6 s, 16: 55.3 / 42.9 s, 24: 53.0 / 44.3 s (docs/benchmarks.md). The bound above: every replay
    # must finish within the 10 s workflow task timeout while the others share the CPU; with 100 slots ~25 replays of
    # 2,600-event histories each took over it and replayed again, for minutes (fault run seed 12, round 15). Runs are
    # capped at 1,000 events (workflows/signals.py); at 12 slots B5's longest task took 1.2 s. Materialising, a local
    # activity too since local-ensure, holds a slot while it runs (seconds each while a burst saturates
    # kube-apiserver): 24 and 40 slots then released 1,000 replicas in 81.6 and 74.8 s against 87-91 s at 12, but 100
    # 17-pod replicas in 67-68 s with 34-37 history events each against 64 s and 25-26 (docs/benchmarks.md).
    max_concurrent_workflow_tasks: int = Field(
        default_factory=lambda: _positive("GROVE_TEMPORAL_MAX_CONCURRENT_WORKFLOW_TASKS", 12), ge=1)
    # A freed workflow-task slot goes to a poll of this worker's sticky queue before one of the shared queue
    # (worker/slots.py): in a creation wave the new replicas' first tasks took the slots, and a nudge for a replica
    # already up waited out the sticky timeout and then queued behind the wave. Off: the SDK's fixed slots.
    sticky_first_slots: bool = Field(
        default_factory=lambda: _switch("GROVE_TEMPORAL_STICKY_FIRST_SLOTS", True),
        description="give freed workflow-task slots to sticky polls first")
    # New replicas' first tasks wait while the worker materialises as many replicas as its creation pace allows, a
    # limit led by how long materialising takes (activities/pacing.py; needs sticky_first_slots). Off: every free slot
    # may take a new replica, as before.
    creation_pacing: bool = Field(
        default_factory=lambda: _switch("GROVE_TEMPORAL_CREATION_PACING", True),
        description="pace new replicas' first tasks by how long materialising takes")
    # Of the SDK's five workflow-task pollers, the share that polls the shared task queue rather than this worker's
    # sticky queue. The SDK's 0.2 gives the shared queue one poller; after a hand-over every workflow the dead worker
    # held arrives there, and with one poller the survivor kept only 1.4 of its 4 slots busy. B5, two workers, 1,000
    # replicas, the leader killed: every replica progressed after 44.5 / 46.3 / 50.3 s at 0.2 and 40.3 / 36.1 s at 0.6
    # (2.0-2.1 slots busy); a lone restarted worker, where every task is on the shared queue anyway, did not change
    # (52.6 s against 51-59 s). Two pollers stay on the sticky queue.
    nonsticky_poll_ratio: float = Field(default=0.6, gt=0, le=1)
    # Temporal's workflow sandbox re-imports the workflow modules for every run it starts or replays and proxies each
    # call into them: about 12 ms of worker CPU per run started or taken into the cache, and 1.8x the CPU per replayed
    # event (replays of the recorded histories, tests/fixtures/histories/, with compiled bytecode; without .pyc files
    # each re-import also compiles, 30 ms more). A hand-over replays every replica the dead worker held. Without it,
    # determinism is held by the replay and compat tests (both ways), the workflow tests (tests/workflows/ run
    # sandboxed) and ruff's banned calls in workflows/ and grove/ (their ruff.toml). Off by default since a fault run
    # without it (seed 17: two workers, one 30 s skewed, partitions, etcd restarts; 37 rounds) found no violation, as
    # the sandboxed runs before it had; on (GROVE_TEMPORAL_WORKFLOW_SANDBOX=1) adds the sandbox's runtime checks.
    workflow_sandbox: bool = Field(
        default_factory=lambda: _switch("GROVE_TEMPORAL_WORKFLOW_SANDBOX", False),
        description="run workflows in Temporal's sandbox (runtime determinism checks, slower starts and replays)")
    # Workflows kept in memory between workflow tasks; one evicted is replayed from its whole history at its next
    # task. The SDK's default (1,000) is below the replica count this is built for: at 5,000 replicas every round
    # would be a replay. A cached replica workflow costs about 40 KB (300 one-pod replicas: +12 MB of worker RSS).
    max_cached_workflows: int = Field(
        default_factory=lambda: _whole_number("GROVE_TEMPORAL_MAX_CACHED_WORKFLOWS", 10_000), ge=0)
    watcher: bool = Field(default=True, description="run the watcher (under leader election)")
    leader_election_namespace: str | None = Field(
        default_factory=lambda: os.environ.get("GROVE_TEMPORAL_LEASE_NAMESPACE") or None,
        description="where the watcher's Lease lives; default: the watched namespace, else 'default'",
    )
    watch_cache: bool = Field(default=True, description="observe replicas from a watch cache in this worker; "
                                                        "off: every observation lists from the apiserver")
    # The watcher's Lease. A standby keeps its watches warm, so hand-over costs little but the wait: a leader killed
    # with -9 is replaced lease_seconds after its last renewal (plus one retry). client-go's defaults (15/10/2 s)
    # made that 17 s; these make it about 4 s, at one PUT per second by the leader (from its own last write, no GET)
    # and one GET per second by each standby.
    lease_seconds: int = Field(default=3, ge=1)
    lease_renew_every: float = Field(default=1.0, gt=0)
    lease_retry_every: float = Field(default=1.0, gt=0)
    # A workflow task waiting on a worker's sticky queue goes to the shared queue after this; with the worker killed,
    # that wait is the workflow's (Temporal's default, 10 s, would be most of the hand-over).
    sticky_timeout: timedelta = Field(default=timedelta(seconds=3), gt=timedelta(0))
    # How long the watcher's leader gathers watch events before it sends the nudges they call for. Each nudge a
    # replica gets is a signal and a workflow task (4 history events); the pods of a gang are bound and become Ready
    # in bursts spread over tens of milliseconds, so a longer window turns a burst into one nudge, at that much more
    # latency for every change. 5 ms, the default, is what the fault runs have run with.
    nudge_coalesce: timedelta = Field(
        default_factory=lambda: timedelta(milliseconds=_whole_number("GROVE_TEMPORAL_NUDGE_COALESCE_MS", 5)))
    # How long a nudge for a change that only moves a replica's status (a pod Ready or Running, a scaled pod bound)
    # may wait to be sent with the changes after it (worker/watcher.py, "Status-only changes"). A change the workflow
    # decides on (a pod losing readiness or a gate, deleted, a base pod bound, a spec change) is sent at once and
    # takes any held ones along. 5 s: a 17-pod replica then comes up in two rounds after its first (history events
    # per replica at 100 x 17: mean 20.4, max 25, against 24.1 / 31 at 1 s, docs/benchmarks.md); the cost is ready
    # counts, and Available where minAvailable is below replicas, up to 5 s late.
    nudge_status_window: timedelta = Field(
        default_factory=lambda: timedelta(milliseconds=_whole_number("GROVE_TEMPORAL_NUDGE_STATUS_WINDOW_MS", 5000)))
    # The workflow task timeout of the replica workflows this worker's reconciler starts (a running replica keeps
    # the one it was started with, across continue-as-new too). A local activity that outlasts 80% of it makes the
    # SDK heartbeat the task: three more history events each time. A new replica's first task materialises it (a
    # local activity creating its objects), and in a creation burst that saturates kube-apiserver it ran ~16 s at
    # 1,000 replicas of 17 pods: two heartbeats at Temporal's 10 s. The cost of a longer one: a task in flight on a
    # worker that dies is retried only after it (replicas at rest have none in flight).
    # Temporal refuses a workflow task timeout over 120 s.
    replica_task_timeout: timedelta = Field(
        default_factory=lambda: _seconds_within("GROVE_TEMPORAL_REPLICA_TASK_TIMEOUT_S", 10, 1, 120))
    watch_resync: timedelta = timedelta(minutes=30)
    reconcile_every: timedelta = timedelta(minutes=10)
    reconciler_check: timedelta = Field(default=timedelta(seconds=60), gt=timedelta(0),
                                        description="how often each worker checks the reconciler is running")
    # How often a replica workflow looks at its replica again when no change was heard (`--replica-resync-seconds`):
    # a round on the watch cache, so a nudge lost on its way still gets acted on. Taken by the replica workflows the
    # reconciler starts; a running reconciler keeps the value it was started with.
    replica_safety_resync: timedelta = Field(default=timedelta(hours=6), gt=timedelta(0))
    # How often a rollout workflow with nothing to do re-reads its PCS (from this worker's watch cache): the longest
    # a PCS's updatedReplicas can lag a replica whose pods were recreated outside a rollout. Taken by the rollout
    # workflows the reconciler starts; a running reconciler keeps the value it was started with.
    rollout_idle_resync: timedelta = Field(default=timedelta(minutes=10), gt=timedelta(0))
    stuck_check: timedelta = Field(default=timedelta(seconds=60), gt=timedelta(0),
                                   description="how often the leading worker looks for stuck replica workflows")
    stuck_attempts: int = Field(default=3, ge=1, description="failed attempts of one workflow task that make it stuck")
    stuck_sweep_batch: int = Field(default=100, ge=1,
                                   description="replica workflows described per check where visibility cannot name "
                                               "those with failing workflow tasks")
    http_port: int | None = Field(
        default_factory=lambda: _port("GROVE_TEMPORAL_HTTP_PORT"),
        description="serve /metrics, /healthz and /readyz on this port; None to disable",
    )
    graceful_shutdown: timedelta = timedelta(seconds=20)
    scheduler_backend: str = Field(
        default_factory=lambda: os.environ.get("GROVE_TEMPORAL_SCHEDULER_BACKEND") or "auto",
        description="gang scheduler for PodCliqueSets without the grove-temporal.io/scheduler-backend annotation: "
                    "auto (kube where the cluster serves native PodGroups, else none), kube, kai or none",
    )

    @property
    def lease_namespace(self) -> str:
        return self.leader_election_namespace or self.watch_namespace or "default"

    @property
    def lease_name(self) -> str:
        """One watcher per watched scope: workers of different scopes must not share a lease."""
        return "grove-temporal-watcher" + (f"-{self.watch_namespace}" if self.watch_namespace else "")
