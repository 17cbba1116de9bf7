"""The worker's /metrics, read the way Prometheus would: counters of Kubernetes requests, nudges, watch events
(`parse` reads any /metrics text, e.g. kube-apiserver's for bench/strain.py)."""

from __future__ import annotations

import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Counters:
    """Counter samples by (metric name, labels); the subtraction gives the requests of a window."""

    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)

    def __sub__(self, other: Counters) -> Counters:
        return Counters({k: v - other.values.get(k, 0.0) for k, v in self.values.items()})

    def total(self, name: str, **match: str) -> float:
        return sum(v for (n, labels), v in self.values.items()
                   if n == name and all(dict(labels).get(k) == want for k, want in match.items()))

    def by(self, name: str, *label_names: str) -> dict[str, float]:
        grouped: dict[str, float] = defaultdict(float)
        for (n, labels), v in self.values.items():
            if n == name and v:
                as_dict = dict(labels)
                grouped["/".join(as_dict.get(label, "") for label in label_names)] += v
        return dict(sorted(grouped.items()))


KUBE_REQUESTS = "grove_temporal_kube_requests_total"
NUDGES = "grove_temporal_nudges_total"
NUDGE_REQUESTS = "grove_temporal_nudge_requests_total"  # by timing: at-once | held | window-ended
OBSERVE_READS = "grove_temporal_observe_reads_total"  # routine replica reads, by source: cache | apiserver
WATCH_EVENTS = "grove_temporal_watch_events_total"
FIRST_LIST_REPLICAS = "grove_temporal_first_list_replicas_total"  # by outcome: versions | read | unchanged


def scrape(port: int, timeout: float = 10.0) -> Counters:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
        return parse(response.read().decode())


def parse(text: str) -> Counters:
    """The counters of a /metrics page in Prometheus' text format (any process's: the worker's, kube-apiserver's)."""
    values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        # a histogram's observation count is a counter too (e.g. the SDK's workflow-task replays)
        kept = {"counter": "_total", "histogram": "_count"}.get(family.type)
        if kept is None:
            continue
        for s in family.samples:
            if s.name.endswith(kept):
                values[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
    return Counters(values)
