"""The operator commands against a running replica: status, list, pause, resume, terminate, history.

They run as a user would run them (the installed console script in a subprocess) and are checked against the real
objects and the workflow's own answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.e2e.harness import Cluster, WorkerProcess, clique, pcs_manifest, wait_for


def cli(*args: str, address: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address}
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def test_operator_commands(cluster: Cluster, worker_process: WorkerProcess) -> None:
    address = worker_process.temporal_address
    ns = cluster.namespace
    cluster.apply(pcs_manifest("ops", ns, replicas=2, termination_delay="1h",
                               cliques=[clique("a", 1, 1)],
                               scaling_groups=None))
    wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")

    def phases() -> dict[int, str]:
        out = cli("status", "ops", "-n", ns, "-o", "json", address=address)
        assert out.returncode == 0, out.stderr
        return {s["ref"]["replica"]: s["phase"] for s in json.loads(out.stdout)}

    wait_for(lambda: phases() == {0: "Available", 1: "Available"}, timeout=20, what="both replicas Available")

    table = cli("status", "ops", "-n", ns, address=address)
    assert table.returncode == 0 and "ops-0-a" in table.stdout and "Available" in table.stdout

    listed = cli("list", "-n", ns, "-o", "json", address=address)
    assert listed.returncode == 0, listed.stderr
    assert sorted((w["pcs"], w["replica"]) for w in json.loads(listed.stdout)) == [("ops", 0), ("ops", 1)]

    # unknown PCS and unknown replica: one clear message naming the argument, exit 1
    missing = cli("status", "nope", "-n", ns, address=address)
    assert missing.returncode == 1 and f"{ns}/nope" in missing.stderr
    bad_replica = cli("pause", "ops", "-n", ns, "--replica", "7", address=address)
    assert bad_replica.returncode == 1 and "--replica 7" in bad_replica.stderr and "0, 1" in bad_replica.stderr
    usage = cli("terminate", "ops", "-n", ns, "--replica", "0", "--reason", "x", "--pcsg", "sg", address=address)
    assert usage.returncode == 2 and "--pcsg-replica" in usage.stderr

    paused = cli("pause", "ops", "-n", ns, "--replica", "1", "--reason", "maintenance", address=address)
    assert paused.returncode == 0 and "accepted: paused" in paused.stdout, paused.stderr
    status = json.loads(cli("status", "ops", "-n", ns, "-r", "1", "-o", "json", address=address).stdout)[0]
    assert status["paused"] is True and status["pause_reason"] == "maintenance"
    assert cli("resume", "ops", "-n", ns, "--replica", "1", address=address).returncode == 0

    before = cluster.live_pclq_uids()
    rejected = cli("terminate", "ops", "-n", ns, "--replica", "0", "--reason", "test", "--pcsg", "nosuch",
                   "--pcsg-replica", "0", address=address)
    assert rejected.returncode == 1 and "rejected" in rejected.stderr and "nosuch" in rejected.stderr
    assert cluster.live_pclq_uids() == before, "a rejected request changes nothing"

    done = cli("terminate", "ops", "-n", ns, "--replica", "0", "--reason", "bad GPU on node-7", address=address)
    assert done.returncode == 0 and "accepted" in done.stdout, done.stderr
    wait_for(lambda: cluster.live_pclq_uids().get("ops-0-a") not in (None, before["ops-0-a"]), timeout=30,
             what="ops-0-a recreated")
    assert cluster.live_pclq_uids()["ops-1-a"] == before["ops-1-a"]

    log = json.loads(cli("history", "ops", "-n", ns, "--replica", "0", "-o", "json", address=address).stdout)
    assert log["terminationsTotal"] == 1
    entry = log["terminations"][0]
    assert entry["forced"] is True and "bad GPU on node-7" in entry["reason"] and entry["scope"] == "pcs-replica"
    human = cli("history", "ops", "-n", ns, "--replica", "0", address=address)
    assert human.returncode == 0 and "bad GPU on node-7" in human.stdout
