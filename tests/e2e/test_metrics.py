"""Conventional metrics on a real worker's /metrics: the Temporal SDK's in Prometheus conventions (seconds,
`_total`), the fleet gauges (replicas by phase, pending deadlines) following a real breach, and every metric the
Grafana dashboard and the PrometheusRule in deploy/monitoring/ use."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.e2e.harness import Cluster, WorkerProcess, clique, http_get, is_ready, pcs_manifest, wait_for
from tests.e2e.test_observability import sample

MONITORING = Path(__file__).resolve().parents[2] / "deploy" / "monitoring"
SDK_FAILURE_COUNTERS = {"temporal_request_failure_total", "temporal_long_request_failure_total"}
_PROMQL_FUNCTIONS = {"max", "min", "sum", "rate", "increase", "histogram_quantile", "by", "le", "count", "avg"}


def used_metrics() -> set[str]:
    """Metric names in the dashboard's and the rule's PromQL."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    exprs += [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    names = set()
    for expr in exprs:
        without_labels = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
        names |= {t for t in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", without_labels)
                  if t.startswith(("grove_temporal_", "temporal_"))}
    return names - _PROMQL_FUNCTIONS


def exposed(metrics: str) -> set[str]:
    """Names of the samples, and of what every declared family may expose (a labelled counter that has not counted
    yet has its `# TYPE` line only)."""
    found = {line.split("{")[0].split(" ")[0] for line in metrics.splitlines() if line and not line.startswith("#")}
    for line in metrics.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[:2] == ["#", "TYPE"]:
            name, kind = parts[2], parts[3]
            found.add(name)
            if kind == "counter" and not name.endswith("_total"):
                found.add(name + "_total")
            if kind == "histogram":
                found |= {name + "_bucket", name + "_count", name + "_sum"}
    return found


def test_the_dashboard_and_alerts_use_metrics_a_worker_exposes(cluster: Cluster,
                                                              worker_process: WorkerProcess) -> None:
    port = worker_process.http_port
    cluster.apply(pcs_manifest("met", cluster.namespace, termination_delay="1h", cliques=[clique("a", 2, 2)]))
    pods = wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")

    def available() -> str | None:
        text = http_get(port, "/metrics")[1]
        return text if sample(text, "grove_temporal_replicas", phase="Available") == 1 else None

    wait_for(available, timeout=60, interval=1, what="grove_temporal_replicas{phase=Available} 1")
    cluster.fail_readiness(pods[0]["metadata"]["name"])  # a breach: one deadline, 1h away

    def breached() -> str | None:
        text = http_get(port, "/metrics")[1]
        return text if sample(text, "grove_temporal_replicas", phase="Breached") == 1 else None

    try:
        metrics = wait_for(breached, timeout=90, interval=1, what="grove_temporal_replicas{phase=Breached} 1")
    except AssertionError:
        gauges = [line for line in http_get(port, "/metrics")[1].splitlines() if "grove_temporal_replicas" in line]
        raise AssertionError(f"gauges: {gauges}; pods: {[(p['metadata']['name'], is_ready(p)) for p in cluster.pods()]}"
                             ) from None
    def one_deadline() -> str | None:
        text = http_get(port, "/metrics")[1]
        return text if sample(text, "grove_temporal_pending_deadlines") == 1 else None

    metrics = wait_for(one_deadline, timeout=60, interval=1, what="1 pending deadline")
    assert 0 < sample(metrics, "grove_temporal_next_deadline_seconds") <= 3600
    assert sample(metrics, "grove_temporal_replicas", phase="Available") == 0

    # The SDK's metrics follow Prometheus conventions: counters end in _total, durations are seconds.
    sdk = {line.split("{")[0].split(" ")[0] for line in metrics.splitlines() if line.startswith("temporal_")}
    assert sdk and not any(n.endswith("_milliseconds") or "_ms_" in n for n in sdk), sorted(sdk)
    assert any(n.endswith("_seconds_bucket") for n in sdk), sorted(sdk)
    assert any(n.endswith("_total") for n in sdk), sorted(sdk)

    # The SDK's core registers its failure counters with the first failed call: a worker whose calls all succeeded
    # has no such line yet (seen in CI: no nudge happened to find its workflow not started yet). Their names are the
    # SDK's own (its core library names request_failure and long_request_failure, with the temporal_ prefix and the
    # _total suffix of every counter above); every other name the dashboard and the rule use must be on /metrics.
    missing = used_metrics() - exposed(metrics) - SDK_FAILURE_COUNTERS
    assert not missing, f"used by deploy/monitoring but not on /metrics: {sorted(missing)}; SDK: {sorted(sdk)}"
