"""The stack-strain counters bench b3 reports beside each phase (bench/strain.py): pure parsing of KWOK's log and
kube-apiserver's /metrics text."""

from __future__ import annotations

from pathlib import Path

from bench import strain

PLAYED = ('{"time":"2026-12-07T08:19:17Z","level":"INFO","msg":"Patch pod","pod":"ns/a","node":"kwok-node-1"}\n')
REFUSED = ('{"time":"2026-12-07T08:19:46Z","level":"ERROR","msg":"failed to apply stage","err":"failed to patch pod a:'
           ' Pod \\"a\\" is invalid: status.podIPs: may specify no more than one IP for each IP family",'
           '"pod":"ns/a","stage":"pod-running-ready"}\n')


def test_refused_plays_are_counted_and_successful_ones_are_not(tmp_path: Path) -> None:
    log = tmp_path / "kwok.log"
    log.write_text("=== starting: kwok --config=stages.yaml\n" + PLAYED * 3 + REFUSED * 2 + PLAYED)
    assert strain.rejected_plays(log) == 2


def test_a_stack_without_a_kwok_log_yet_has_no_refused_plays(tmp_path: Path) -> None:
    assert strain.rejected_plays(tmp_path / "missing.log") == 0


METRICS = """\
# HELP apiserver_terminated_watchers_total [STABLE] Counter of watchers closed due to unresponsiveness broken by resource type.
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group="",resource="events"} 4
apiserver_terminated_watchers_total{group="",resource="pods"} 44
apiserver_terminated_watchers_total{group="grove.io",resource="pods"} 7
# HELP apiserver_watch_cache_events_dispatched_total Counter of events dispatched in watch cache broken by resource type.
# TYPE apiserver_watch_cache_events_dispatched_total counter
apiserver_watch_cache_events_dispatched_total{group="",resource="pods"} 156292
"""


def test_only_core_pod_watchers_count() -> None:
    assert strain.terminated_pod_watchers(METRICS) == 44


def test_before_any_termination_the_counter_is_absent_and_reads_zero() -> None:
    assert strain.terminated_pod_watchers(METRICS.split("# HELP apiserver_watch_cache")[0].replace(
        'apiserver_terminated_watchers_total{group="",resource="pods"} 44\n', "")) == 0


def test_a_phase_reports_what_it_added() -> None:
    before = {"kwok_rejected_plays": 19, "terminated_pod_watchers": 3}
    after = {"kwok_rejected_plays": 6210, "terminated_pod_watchers": 51}
    assert strain.since(after, before) == {"kwok_rejected_plays": 6191, "terminated_pod_watchers": 48}
