"""Prometheus metrics of grove-temporal (the Temporal SDK exports its own beside these).

Counted only in activities, the watcher and the worker's stuck-workflow check, never in workflow code: workflow code is replayed, so a counter
there would count every replay again.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

KUBE_REQUESTS = Counter(
    "grove_temporal_kube_requests",
    "Kubernetes API requests issued by this process",
    ["verb", "resource", "code"],
)
KUBE_REQUEST_SECONDS = Histogram(
    "grove_temporal_kube_request_seconds",
    "Kubernetes API request latency (until response headers for watches)",
    ["verb", "resource"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
GATE_RELEASES = Counter(
    "grove_temporal_gate_releases",
    "Pods whose grove.io/podgang-pending-creation gate was removed",
    ["gang"],  # base | scaled
)
TERMINATIONS = Counter(
    "grove_temporal_terminations",
    "Gang terminations carried out",
    ["scope", "cause"],  # scope: pcs-replica | pcsg-replica; cause: breach | operator
)
BREACH_SECONDS = Histogram(
    "grove_temporal_breach_duration_seconds",
    "How long a breach had lasted when its gang was terminated",
    ["scope"],
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 4 * 3600, 24 * 3600),
)
NUDGES = Counter(
    "grove_temporal_nudges",
    "Nudge signals sent to replica workflows by the watcher",
    ["outcome"],  # sent | workflow-missing | failed
)
NUDGE_TIMINGS = ("at-once", "held", "window-ended")  # held: status-only, waits for the status window
NUDGE_REQUESTS = Counter(
    "grove_temporal_nudge_requests",
    "Changes the watcher asked to nudge a replica workflow for, by when the nudge went (worker/watcher.py, "
    "\"Status-only changes\")",
    ["timing"],  # NUDGE_TIMINGS; window-ended: a held nudge let go at its window's end
)
for _timing in NUDGE_TIMINGS:  # on /metrics from the start
    NUDGE_REQUESTS.labels(_timing)
WATCH_EVENTS = Counter(
    "grove_temporal_watch_events",
    "Kubernetes watch events received by the watcher",
    ["resource", "relevant"],  # relevant: true | false | own-step (the workflow's own step: no nudge)
)
FIRST_LIST_REPLICAS = Counter(
    "grove_temporal_first_list_replicas",
    "Replicas a worker's first lists found, by what its watcher did with them (worker/watermark.py)",
    ["outcome"],  # versions: nudged for a read of the cache | read: nudged for a read of the apiserver | unchanged
)
for _outcome in ("versions", "read", "unchanged"):  # on /metrics from the start, at 0 until a first list
    FIRST_LIST_REPLICAS.labels(_outcome)
PROGRESS_PROBES = Counter(
    "grove_temporal_watch_progress_probes",
    "LISTs that showed a watch-cache kind complete up to a version its watch had not reported yet (another worker's "
    "cache listed it later, and nothing of that kind changed since), by kind",
    ["resource"],
)
CACHED_READS = Counter(
    "grove_temporal_observe_reads",
    "Routine replica observations, by where they were read from (the watch cache, or the apiserver where the cache "
    "could not serve them)",
    ["source"],  # cache | apiserver
)
STUCK_WORKFLOWS = Gauge(
    "grove_temporal_stuck_workflows",
    "Running replica workflows whose workflow task keeps failing (grove-temporal doctor); the leading worker reports "
    "them, the others 0",
)
FOREGROUND_DELETIONS_FINISHED = Counter(
    "grove_temporal_foreground_deletions_finished",
    "PodCliques of ours left in foreground deletion with their pods gone, deleted again with Background propagation "
    "(worker/stuck_deletions.py)",
)
MATERIALISING = Gauge(
    "grove_temporal_materialising",
    "Replica materialisations (creating a replica's objects) running in this worker now (activities/pacing.py)",
)
MATERIALISE_LIMIT = Gauge(
    "grove_temporal_materialise_limit",
    "How many materialisations this worker lets run before its polls for new replicas' first tasks wait, led by how "
    "long they take (activities/pacing.py)",
)
