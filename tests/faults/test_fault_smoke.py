"""The short seeded fault run of issue 7 (the long one is `grove-temporal faults --seed N --rounds 100`).

Its own local stack (Temporal on a SQLite file, so it can be restarted), a worker process and the fault workload;
four rounds with a fixed seed bring every kind of fault (lost node first, then worker SIGKILL, Temporal restart and
a kube-apiserver outage with a deadline pending, in the seed's order), and every round changes one PCS's template
(image or env var), so a rolling update runs under that round's fault. Every invariant is checked after each round
from the real objects and the workflow histories; none may be violated. A second run widens the chaos: two workers
(one with its clock off), etcd restarts and network partitions.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faults import runner, schedule

pytestmark = pytest.mark.stack  # starts real stack components of its own

SEED = 7
ROUNDS = 4
WIDE_SEED = 4  # partitions of either worker, the leader cut off from Temporal for 34 s, a kill of the leader


async def test_seeded_fault_rounds_violate_no_invariant(tmp_path: Path) -> None:
    settings = schedule.Settings(round_seconds=12.0, apiserver_down_seconds=(4.0, 10.0), worker_dead_seconds=(0.5, 2.0),
                                 temporal_down_seconds=(0.0, 2.0), extra_fault_probability=0.0, scale_probability=1.0,
                                 template_change_probability=1.0)
    options = runner.Options(seed=SEED, rounds=ROUNDS, replicas=1, settings=settings, settle_timeout=150.0,
                             out_dir=tmp_path)
    results = await runner.FaultRun(options).run()
    print("\n" + runner.render(results))
    runner.write_results(results, tmp_path)

    assert results["violations"] == 0, results["violation_details"]
    progress = json.loads(runner.progress_path(options).read_text())  # written after every round
    assert progress["rounds_done"] == ROUNDS == results["rounds_done"], progress["rounds_done"]
    assert set(results["faults"]) == set(schedule.FAULT_KINDS), results["faults"]
    assert results["terminations_checked"] > 0
    assert sum(v for k, v in results["hpa_scale_writes"].items() if not k.startswith("skipped")) >= 2 * ROUNDS - 2
    assert results["counts"]["scaled_releases_checked"] > 0
    assert results["counts"]["foreign_checked"] > 0
    assert results["counts"]["histories_replayed"] > 0
    assert all(r["settled"] for r in results["round_reports"]), results["round_reports"]
    # a template change every round (issue 12): the rollouts ran under the faults, were checked and completed
    assert len(results["template_changes"]) == ROUNDS, results["template_changes"]
    assert results["counts"]["rollout_pod_deletions_checked"] > 0
    assert results["counts"]["rollouts_checked_complete"] > 0
    # the slowest deletions are named with the steps that ran around them (a breach's break precedes its deadline)
    slowest = results["slowest_deletions"]
    assert len(slowest) == min(10, results["deletion_after_deadline_ms"]["n"]) > 0
    assert slowest[0]["after_deadline_ms"] == results["deletion_after_deadline_ms"]["max"]
    assert [d["after_deadline_ms"] for d in slowest] == sorted((d["after_deadline_ms"] for d in slowest), reverse=True)
    assert any(" break " in step for d in slowest for step in d["steps_around"]), slowest


async def test_wider_chaos_two_workers_one_skewed_partitions_and_etcd_violate_no_invariant(tmp_path: Path) -> None:
    """Two workers on the task queue, the second one's wall clock 30 s behind; three rounds whose primaries are an
    etcd restart and partitions of one worker from kube-apiserver and from Temporal (packets dropped); worker kills
    join some rounds and may hit either worker."""
    from faults.partition import Partitions

    try:
        probe = Partitions()
        reason = probe.unavailable()
        probe.cleanup()
    except RuntimeError as err:
        reason = str(err)
    if reason is not None:
        pytest.skip(f"partitions cannot be made on this machine: {reason}")
    kinds = (schedule.ETCD_RESTART, *schedule.PARTITIONS, schedule.WORKER_KILL)
    settings = schedule.Settings(round_seconds=12.0, worker_dead_seconds=(0.5, 2.0), etcd_down_seconds=(1.0, 4.0),
                                 partition_seconds=(8.0, 35.0), extra_fault_probability=0.3, scale_probability=0.5,
                                 template_change_probability=0.5, fault_kinds=kinds, workers=2,
                                 worker_clock_skew_seconds=-30.0)
    options = runner.Options(seed=WIDE_SEED, rounds=len(kinds), replicas=1, settings=settings, settle_timeout=150.0,
                             out_dir=tmp_path)
    results = await runner.FaultRun(options).run()
    print("\n" + runner.render(results))
    runner.write_results(results, tmp_path)

    assert results["violations"] == 0, results["violation_details"]
    assert set(schedule.PARTITIONS) | {schedule.ETCD_RESTART} <= set(results["faults"]), results["faults"]
    assert {p["from"] for p in results["partitions"]} == {"apiserver", "temporal"}
    assert results["workers"] == 2 and results["worker_clock_skew_seconds"] == -30.0
    assert results["terminations_checked"] > 0
    assert results["counts"]["histories_replayed"] > 0
    assert all(r["settled"] for r in results["round_reports"]), results["round_reports"]
