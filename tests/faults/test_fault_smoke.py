"""The short seeded fault run of issue 7 (the long one is `grove-temporal faults --seed N --rounds 100`).

Its own local stack (Temporal on a SQLite file, so it can be restarted), a worker process and the fault workload;
four rounds with a fixed seed bring every kind of fault (lost node first, then worker SIGKILL, Temporal restart and
a kube-apiserver outage with a deadline pending, in the seed's order), and every round changes one PCS's template
(image or env var), so a rolling update runs under that round's fault. Every invariant is checked after each round
from the real objects and the workflow histories; none may be violated.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from faults import runner, schedule

pytestmark = pytest.mark.stack  # starts real stack components of its own

SEED = 7
ROUNDS = 4


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
