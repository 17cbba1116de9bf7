"""Telemetry of a real worker: Prometheus metrics (ours and the Temporal SDK's) on one endpoint, health endpoints,
OpenTelemetry traces that follow the reconciler into the replica workflows it starts, JSON logs with workflow ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.harness import Cluster, WorkerProcess, clique, http_get, pcs_manifest, wait_for


@pytest.fixture
def observed_worker(worker_process: WorkerProcess) -> WorkerProcess:
    """The test's worker, restarted with console tracing and JSON logs."""
    worker_process.stop()
    worker_process.extra_env["OTEL_TRACES_EXPORTER"] = "console"
    worker_process.extra_args += ["--log-format", "json"]
    return worker_process.start()




def sample(metrics: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in metrics.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


def test_metrics_health_traces_and_logs(cluster: Cluster, observed_worker: WorkerProcess) -> None:
    port = observed_worker.http_port
    wait_for(lambda: http_get(port, "/healthz")[0] == 200, timeout=30, what="/healthz")
    ready = wait_for(lambda: (r := http_get(port, "/readyz"))[0] == 200 and r, timeout=30, what="/readyz 200")
    checks = json.loads(ready[1])
    # details, not checks: the stack serves native PodGroups, so `auto` chose the kube backend; stuck workflows
    assert checks.pop("schedulerBackend") == "kube (auto: the cluster serves scheduling.k8s.io/v1alpha2 podgroups)"
    checks.pop("stuckWorkflows", None)
    assert checks | {"watcher": "x"} == {"temporal": "ok", "kubernetes": "ok", "worker": "ok", "watcher": "x",
                                         "watchCache": "synced"}
    assert "scheduler backend: kube (auto" in observed_worker.logs()

    cluster.apply(pcs_manifest("obs", cluster.namespace, cliques=[clique("a", 3, 2)]))
    wait_for(lambda: cluster.ready_pods(3), timeout=60, what="3 Ready pods")

    metrics = http_get(port, "/metrics")[1]
    assert sample(metrics, "grove_temporal_gate_releases_total", gang="base") >= 3
    assert sample(metrics, "grove_temporal_kube_requests_total", verb="create", resource="pods") >= 3
    assert sample(metrics, "grove_temporal_kube_requests_total", verb="patch", resource="pods") >= 3
    assert sample(metrics, "grove_temporal_kube_request_seconds_count", verb="list", resource="pods") >= 1
    assert sample(metrics, "grove_temporal_nudges_total", outcome="sent") >= 1
    assert "temporal_" in metrics and sample(metrics, "temporal_request_total") > 0, "SDK metrics appended"
    assert any(line.startswith("temporal_") and not line.startswith("#") for line in metrics.splitlines())

    observed_worker.stop()  # flushes batched spans
    text = Path(observed_worker.log_path).read_text()
    spans = _console_spans(text)
    started = {s["context"]["trace_id"] for s in spans if s["name"] == "StartWorkflow:ReplicaWorkflow"}
    runs = {s["context"]["trace_id"] for s in spans if s["name"] == "RunWorkflow:ReplicaWorkflow"}
    activities = {s["context"]["trace_id"] for s in spans
                  if s["name"] in ("RunActivity:observe_replica", "RunActivity:observe_replica_cached")}
    assert started and runs and started & runs, "replica workflows started by the reconciler continue its trace"
    assert runs & activities, "activities are traced inside the replica workflow's trace"

    records = [json.loads(line) for line in text.splitlines() if line.startswith('{"time"')]
    replica_lines = [r for r in records if str(r.get("workflow_id", "")).startswith(f"pcs/{cluster.namespace}/obs/")]
    assert replica_lines and all(r["replica"] == 0 and r["pcs"] == "obs" for r in replica_lines)


def _console_spans(text: str) -> list[dict]:
    """ConsoleSpanExporter prints each span as a pretty-printed JSON object."""
    spans, buffer, depth = [], [], 0
    for line in text.splitlines():
        if depth == 0 and line == "{":
            buffer, depth = [line], 1
            continue
        if depth:
            buffer.append(line)
            depth += line.count("{") - line.count("}")
            if depth == 0:
                try:
                    obj = json.loads("\n".join(buffer))
                except ValueError:
                    continue
                if "context" in obj and "name" in obj:
                    spans.append(obj)
    return spans
