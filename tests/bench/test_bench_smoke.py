"""Smoke versions of the benchmarks (issue 6): tiny sizes on the session's stack, so the benchmarks cannot rot.

Nothing here asserts a performance target (figures come from `grove-temporal bench`, printed with their command);
only that each scenario runs end to end and its JSON has the keys and sane values. Never-early (B2) is asserted:
it is a correctness property, not a figure.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from bench.runner import run_scenario
from workflows import signals

pytestmark = pytest.mark.stack  # starts real stack components of its own

if TYPE_CHECKING:
    from localstack.stack import LocalStack

REPO = Path(__file__).resolve().parents[2]


def _envelope_ok(result: dict[str, Any], scenario: str) -> dict[str, Any]:
    assert result["scenario"] == scenario
    assert result["command"]
    assert len(result["git"]["commit"]) == 40
    assert result["machine"]["cpu_count"] >= 1 and result["machine"]["memory_gib"] > 0
    assert len(result["machine"]["loadavg_at_start"]) == 3
    for key in ("python", "temporalio", "kubernetes", "kube_apiserver", "temporal_cli"):
        assert result["versions"][key], key
    json.dumps(result)  # all of it serialisable
    return dict(result["results"])


def _positive_summary(summary: dict[str, Any], n: int | None = None) -> None:
    assert summary["n"] > 0 if n is None else summary["n"] == n
    assert 0 < summary["p50"] <= summary["p99"] <= summary["max"]


async def test_b1_release_against_the_floor(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("b1", {"replicas": 2, "interval": 1.0}, stack=stack), "b1")
    for side in ("product_s", "floor_s"):
        _positive_summary(results[side]["base_release_from_create"], 2)
        _positive_summary(results[side]["base_release_per_pod"], 8)
        _positive_summary(results[side]["scaled_release_after_base_scheduled"], 2)
    assert all(r["p50"] and r["p99"] for r in results["ratio_product_to_floor"].values())
    assert set(results["targets"]) == {"scaled_release_p99_le_1s", "scaled_release_p99_le_3x_floor"}


async def test_b1_with_two_backends_gives_each_its_rows_and_floor(stack: LocalStack) -> None:
    result = await run_scenario("b1", {"replicas": 2, "interval": 1.0, "backends": ("kube", "none")}, stack=stack)
    results = _envelope_ok(result, "b1")
    assert set(results["backends"]) == {"kube", "none"}
    for one in results["backends"].values():
        for side in ("product_s", "floor_s"):
            _positive_summary(one[side]["scaled_release_after_base_scheduled"], 2)
    assert any("kube, none" in note for note in result["notes"])


async def test_b2_termination_is_never_early(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("b2", {"replicas": 2, "delay": 2.0}, stack=stack), "b2")
    _positive_summary(results["late_observed_s"], 2)
    _positive_summary(results["late_recorded_s"], 2)
    assert results["early"] == {"observed": 0, "recorded": 0, "server_deletion_timestamp": 0}
    assert results["targets"]["never_early"]


async def test_b3_scale_grows_between_sizes(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("b3", {"sizes": (3, 6), "per_pcs": 2}, stack=stack), "b3")
    assert [s["replicas"] for s in results["sizes"]] == [3, 6]
    for size in results["sizes"]:
        assert 0 < size["all_released_s"] <= size["all_mirrored_ready_s"] <= size["quiet_s"]
        assert size["worker_cpu_s"] > 0 and size["worker_peak_rss_mib"] > 0
        assert set(size["cpu_ms_per_replica"]) == {"worker", "temporal", "kube-apiserver"}
        assert size["cpu_ms_per_replica"]["worker"] > 0 and size["cpu_ms_per_replica"]["temporal"] > 0
        assert size["kube_requests_by_verb"]["create"] >= size["replicas"]
        assert size["history_events_per_replica"]["n"] == size["replicas"]
        waits = size["workflow_task_queue_wait"]  # every replica's first task at least, from the sampled histories
        assert waits["all_s"]["n"] >= size["replicas"] and waits["all_s"]["min"] >= 0
        assert round(waits["after_sticky_timeout_s"]["n"] / size["replicas"], 2) == waits["sticky_timeouts_per_replica"]
        assert size["read_only_workflow_tasks_per_replica"] >= 0
        nudges = size["nudges_per_replica"]  # the watcher nudged every replica at least for its last pod Ready
        assert set(nudges) == {"sent", "at_once_requests", "held_requests", "window_ended_requests"}, nudges
        assert nudges["sent"] >= 1 and nudges["at_once_requests"] >= 1, nudges
        tasks = size["workflow_tasks"]  # every replica's history read: at least its first task each, none negative
        assert tasks["replicas_read"] == size["replicas"] and tasks["all_replicas"]["workflow_tasks"] >= 1, tasks
        assert min(tasks["all_replicas"].values()) >= 0 and tasks["target"] == 25, tasks
        assert (tasks["replicas_over"] > 0) == (size["history_events_per_replica"]["max"] > 25), tasks
        heavy = size["heaviest_replicas"]  # the longest histories first, each with its rounds and its pods' milestones
        assert heavy[0]["history_events"] == size["history_events_per_replica"]["max"], heavy
        assert [h["history_events"] for h in heavy] == sorted((h["history_events"] for h in heavy), reverse=True)
        for replica in heavy:
            times = [r["at_s"] for r in replica["rounds"]]
            assert times and times == sorted(times) and times[0] > 0, replica
            assert set(replica["pods_s"]) == {"released", "bound", "ready"}, replica
        spread = size["replica_ready_spread_s"]  # every replica's pods came Ready: one spread each, none negative
        assert spread["n"] == size["replicas"] and spread["min"] >= 0
        assert size["pod_released_to_ready_s"]["min"] >= 0
        floor = size["floor"]  # the direct client on the same stack, just before
        assert 0 < floor["create_requests_s"] <= floor["all_released_s"] and size["all_released_vs_floor"] > 0
        assert floor["all_released_s"] <= floor["all_ready_s"] and size["all_ready_vs_floor"] > 0
        assert floor["kube_requests_per_replica"] >= 6  # Service, PodClique, PodGang, pod, refs, gate (+ PCS)
        # a few replicas' requests may cost kube-apiserver less than one 10 ms tick: summed over the runs, below
        assert floor["stack_cpu_s"]["kube-apiserver"] >= 0 and "temporal" not in floor["stack_cpu_s"]
        assert set(floor["cpu_ms_per_replica"]) == {"kube-apiserver"}
        orchestrated = size["temporal_floor"]  # the same work, one minimal workflow of one activity per replica
        assert orchestrated["workflows"] == size["replicas"] and orchestrated["all_released_s"] > 0
        assert orchestrated["kube_requests_per_replica"] == floor["kube_requests_per_replica"]
        assert orchestrated["history_events_per_replica"] == 11  # started, 2 workflow tasks, 1 activity, completed
        # its worker is a process of its own, as the product's: its CPU is the floor's, not the bench's (a few
        # workflows may cost less than one 10 ms tick of /proc accounting: checked summed over the runs, below)
        assert orchestrated["worker_cpu_s"] >= 0 and "worker" in orchestrated["cpu_ms_per_replica"]
        local = size["temporal_floor_local"]  # the same with a local activity: started, 1 task, a marker, completed
        assert local["history_events_per_replica"] == 6, local
        assert local["kube_requests_per_replica"] == orchestrated["kube_requests_per_replica"]
        assert local["worker_cpu_s"] >= 0
        for phase in (size, floor, orchestrated, local):  # each phase's strain on its own stack, counted from its start
            assert set(phase["stack_strain"]) == {"kwok_rejected_plays", "terminated_pod_watchers"}
            assert all(isinstance(v, int) and v >= 0 for v in phase["stack_strain"].values()), phase["stack_strain"]
    assert sum(s[floor]["worker_cpu_s"] for s in results["sizes"] for floor in ("temporal_floor", "temporal_floor_local")) > 0
    assert sum(s[phase]["stack_cpu_s"]["kube-apiserver"] for s in results["sizes"] for phase in ("floor", "temporal_floor")) > 0
    (growth,) = results["growth"]
    assert growth["size_ratio"] == 2.0
    assert growth["worker_cpu_s"]["ratio"] and growth["kube_requests"]["per_replica_ratio"]


async def test_b3_repeated_reports_the_median_run_and_every_run_beside_it(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("b3", {"sizes": (3,), "per_pcs": 3, "floors": (), "repeat": 3},
                                              stack=stack), "b3")
    (size,) = results["sizes"]
    runs = size["product_runs"]
    assert len(runs) == 3 and all(run["all_released_s"] > 0 for run in runs)
    assert size["all_released_s"] == sorted(run["all_released_s"] for run in runs)[1]
    spread = size["product_spread"]
    assert spread["all_released_s"] == {"min": min(r["all_released_s"] for r in runs),
                                        "max": max(r["all_released_s"] for r in runs)}
    assert spread["history_events_per_replica_p50"]["min"] > 0


async def test_b3_that_runs_out_of_time_carries_what_it_measured(stack: LocalStack) -> None:
    from bench.report import Unfinished

    # the worker cannot be quiet for 5 s within 1 s: the product phase times out, every time
    with pytest.raises(Unfinished) as late:
        await run_scenario("b3", {"sizes": (3,), "per_pcs": 3, "floors": (), "timeout": 1.0}, stack=stack)
    results = _envelope_ok(late.value.results, "b3")
    # which wait ran out depends on the machine: the pods' ("timed out after 1s waiting for ...") or the quiet one's
    assert results["timed_out"] == str(late.value) and "1s" in results["timed_out"], results["timed_out"]
    (size,) = results["sizes"]
    assert size["replicas"] == 3 and size["pods_wanted"] == 3 and size["timed_out_after_s"] >= 1.0
    assert 0 <= size["pods_released"] <= size["pods_live"] <= 3
    # whatever the worker had done by then (within 1 s it may not have created anything yet)
    assert size["kube_requests"] >= 0 and size["worker_cpu_s"] >= 0 and size["worker_peak_rss_mib"] > 0
    assert set(size["cpu_ms_per_replica"]) == {"worker", "temporal", "kube-apiserver"}
    assert "all_released_s" not in size and results["growth"] == []


async def test_b4_idle_cost_splits_fixed_and_per_replica(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("b4", {"replicas": 3, "window": 5.0, "per_pcs": 3,
                                                      "rollout_resync": 20.0, "safety_resync": 50.0},
                                              stack=stack), "b4")
    assert set(results["per_replica_per_hour"]) == {"kube_requests", "history_events", "cpu_seconds"}
    fixed = results["fixed_per_worker_per_hour"]
    assert fixed["kube_requests"] > 0 and fixed["cpu_seconds"] > 0  # lease renewals at the least
    measured = results["measured"]
    # The replicas' safety rounds came from their own timers, after the other windows, and read the watch cache.
    assert results["safety_rounds_in_windows"] == 0
    assert measured["resync_round_all_replicas"]["history_events"] > 0
    assert measured["resync_round_all_replicas"]["kube_requests"] == 0, measured["resync_round_all_replicas"]
    assert measured["full_pass_loaded"]["history_events"] > 0
    # The settled PCS's rollout workflow slept through the full pass, and its idle round read the watch cache.
    assert results["rollout_workflows"] == 1 and results["rollouts_woken_by_full_pass"] == 0
    assert measured["idle_round_all_rollouts"]["history_events"] > 0
    assert measured["idle_round_all_rollouts"]["kube_requests"] == 0, measured["idle_round_all_rollouts"]
    assert all(m["seconds"] > 0 for m in measured.values())


async def test_b5_recovery_after_sigkill(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("b5", {"replicas": 3, "per_pcs": 3, "after_rollout": True}, stack=stack),
                           "b5")
    # A rolling update first: each replica's run grew past QUIET_HISTORY_EVENTS and, quiet again, handed over, so
    # the restarted worker replays short runs.
    assert results["rolled_to_new_image_s"] > 0
    assert results["replicas_in_a_later_run_at_kill"] == 3, results["history_events_at_kill"]
    assert results["history_events_at_kill"]["n"] == 3
    assert results["history_events_at_kill"]["max"] < signals.QUIET_HISTORY_EVENTS
    _positive_summary(results["progressed_after_kill_s"], 3)
    _positive_summary(results["progressed_after_pod_notready_s"], 3)  # each replica from its own pod's NotReady
    assert results["progressed_after_pod_notready_s"]["max"] <= results["all_progressed_after_kill_s"]
    assert abs(results["all_progressed_after_kill_s"] - results["progressed_after_kill_s"]["max"]) < 0.01
    assert results["worker_ready_after_kill_s"] and results["watcher_lease_taken_after_kill_s"]
    phases = results["recovery_phases"]  # read from the three replicas' histories
    assert phases["workflows"] == 3 and phases["nudged_after_kill_s"]["n"] == 3
    assert phases["task_completed_after_kill_s"]["n"] == 3
    assert phases["nudged_after_kill_s"]["min"] <= phases["task_completed_after_kill_s"]["min"]
    # The restarted worker took the Lease from its dead predecessor on this host and, alone on the task queue, sent
    # the dead worker's workflows back to the shared queue: no task waited out the sticky timeout.
    assert phases["sticky_timeouts"] == 0, phases
    # The floor: the same NotReady wave after the pods were Ready again, with the worker alive, measured alike.
    floor = results["floor_worker_alive"]
    _positive_summary(floor["progressed_s"], 3)
    _positive_summary(floor["pods_seen_notready_s"], 3)
    _positive_summary(floor["progressed_after_pod_notready_s"], 3)
    assert abs(floor["all_progressed_s"] - floor["progressed_s"]["max"]) < 0.01
    assert results["over_floor_s"] == round(results["all_progressed_after_kill_s"] - floor["all_progressed_s"], 2)
    # Restarted with nothing changed: without the Lease's nudge watermark every replica is nudged and replayed; with
    # it (recorded once the leader had nudged every change) none is, and no replica's history grows.
    removed, kept = (results["restart_nothing_changed"][k] for k in ("watermark_removed", "watermark_kept"))
    assert removed["first_lists"]["not_nudged"] == 0 and removed["nudges_sent"] >= 3, removed
    assert removed["replays"] >= 3 and removed["history_events_added"]["min"] >= 2, removed
    assert kept["watermark_covered_the_fleet_at_kill"] is True, kept
    assert kept["first_lists"] == {"nudged_with_versions": 0, "nudged_for_a_read": 0, "not_nudged": 3}, kept
    assert kept["nudges_sent"] == 0 and kept["history_events_added"]["max"] == 0, kept
    assert kept["replays"] < removed["replays"], (kept, removed)
    # The replicas are left Breached by the floor's wave: the new leader's fleet gauges read their deadlines from
    # the memo in the visibility listing, and query none of them (a query was a workflow task each, and on a new
    # worker a replay). At most one task of anything else (the reconciler's timer may fire meanwhile).
    assert kept["workflow_tasks"] <= 1, kept


async def test_scaleout_over_two_workers_does_every_action_once(stack: LocalStack) -> None:
    options = {"replicas": 4, "per_pcs": 2, "worker_counts": (1, 2), "delay": 2.0}
    results = _envelope_ok(await run_scenario("scaleout", options, stack=stack), "scaleout")
    assert [r["workers"] for r in results["worker_counts"]] == [1, 2]
    for one in results["worker_counts"]:
        assert one["duplicates"] == [], one["duplicates"]
        # every replica released twice (created, then recreated after its gang termination), terminated once
        assert one["once"]["pods_released"] == 8 and one["once"]["terminations"] == 4
        assert one["once"]["pclq_incarnations"] == 8 and one["once"]["gang_terminated_events"] == 4
        assert 0 < one["all_released_s"] <= one["all_mirrored_ready_s"]
        assert one["breach_to_all_settled_s"] >= options["delay"]
        assert one["workers_alive_at_end"] == one["workers"]
        assert sum(one["activity_attempts_per_worker"]) > 0
        # Every replica's pod was released twice (created, then recreated), each by a PATCH of the pod.
        assert one["kube_requests_by_verb_resource"].get("patch/pods", 0) >= 8
        # Where each worker's routine reads were served, per worker: the watch caches served some.
        assert len(one["observe_reads_each"]) == one["workers"]
        assert sum(reads.get("cache", 0) for reads in one["observe_reads_each"]) > 0, one["observe_reads_each"]
    assert results["targets"]["no_duplicate_action"]


async def test_scale_write_to_release_against_the_floor(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("scale", {"replicas": 2, "interval": 1.0}, stack=stack), "scale")
    for side in ("product_s", "floor_s"):
        for metric in ("scale_write_to_created", "scale_write_to_released", "scale_write_to_scheduled"):
            _positive_summary(results[side][metric], 2)
        created, released = results[side]["scale_write_to_created"], results[side]["scale_write_to_released"]
        assert created["max"] <= released["max"] <= results[side]["scale_write_to_scheduled"]["max"]
    assert all(r["p50"] and r["p99"] for r in results["ratio_product_to_floor"].values())
    assert set(results["targets"]) == {"released_p99_le_1s", "released_p99_le_3x_floor"}


def test_cli_writes_the_json(tmp_path: Path) -> None:
    """The command as a user runs it: its own fresh stack, a table on stdout, the JSON where --out says."""
    done = subprocess.run(
        [sys.executable, "-m", "worker.cli", "bench", "b2", "--replicas", "2", "--delay", "2", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    (path,) = tmp_path.glob("b2-*.json")
    result = json.loads(path.read_text())
    assert result["command"].endswith("bench b2 --replicas 2 --delay 2 --out " + str(tmp_path))
    assert "late_observed_s" in done.stdout and str(path) in done.stdout
    _envelope_ok(result, "b2")


def _descendants(pid: int) -> set[int]:
    """Every live process below `pid`, from /proc."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_stopped_bench_tears_its_stack_down(tmp_path: Path) -> None:
    """SIGTERM (or Ctrl-C) while a scenario waits: the bench stops its workers and its stack, says so, exits 130 and
    writes nothing (a stopped run used to sit in the scenario's wait until its timeout)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "bench", "b4", "--replicas", "2", "--window", "300", "--out",
         str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("stack ready"):
                break
        assert lines and lines[-1].startswith("stack ready"), "".join(lines)
        stack_processes = _descendants(proc.pid)
        assert len(stack_processes) >= 5, "temporal, etcd, kube-apiserver, the scheduler, KWOK, ..."
        time.sleep(8)  # into the scenario's waits: replicas created, settling or idling
        began = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
        stopped_in = time.monotonic() - began
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, "".join(lines) + rest
    assert "stopped before it finished" in rest and "the stack is down" in rest
    assert stopped_in < 60, f"took {stopped_in:.0f}s to stop"
    assert not [pid for pid in stack_processes if _alive(pid)], "a stack process outlived the bench"
    assert not list(tmp_path.iterdir()), "no JSON for a run that did not finish"


async def test_rollout_against_the_floor(stack: LocalStack) -> None:
    results = _envelope_ok(await run_scenario("rollout", {"replicas": 2, "per_pcs": 1}, stack=stack), "rollout")
    assert results["pods"] == 2 * 17 and results["pcs_count"] == 2
    for side in ("product", "floor"):
        figures = results[side]
        assert figures["all_pods_updated_ready_s"] > 0
        if side == "product":
            assert figures["pods_recreated"] == 2 * 17, figures  # every pod once, none twice
        else:  # the floor re-creates a pod KWOK's stale by-name delete removed (bench/rollout.py)
            assert figures["pods_recreated"] >= 2 * 17, figures
        # one PCS replica at a time within a PCS; maxUnavailable 1 per component keeps the replica available
        assert figures["max_unavailable_replicas_one_pcs"] <= 1, figures
        assert figures["kube_requests"] > 0
    assert results["time_vs_floor"] and results["requests_vs_floor"]


async def test_outage_runs_on_a_stack_of_its_own_and_measures_against_its_floor(stack: LocalStack) -> None:
    """It stops kube-apiserver, so it refuses the session's stack and starts one of its own."""
    with pytest.raises(ValueError, match="stack of its own"):
        await run_scenario("outage", {"replicas": 2}, stack=stack)
    results = _envelope_ok(await run_scenario("outage", {"replicas": 2, "delay": 3.0, "down": 3.0}), "outage")
    assert results["due_before_the_outage"] == 0
    assert results["outage_s"] >= 3.0
    _positive_summary(results["after_answered_s"], 2)
    floor = results["floor_after_answered_s"]  # 0 where its own first delete was kube-apiserver's first answer
    assert floor["n"] == 2 and 0 <= floor["min"] <= floor["p50"] <= floor["max"] < results["after_answered_s"]["max"]
    assert results["over_floor_p50_s"] == round(results["after_answered_s"]["p50"] - floor["p50"], 3)
