"""The operator commands against a running replica: status, list, pause, resume, terminate, history.

They run as a user would run them (the installed console script in a subprocess) and are checked against the real
objects and the workflow's own answers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from unittest.mock import ANY

import yaml

from tests.e2e.harness import Cluster, WorkerProcess, clique, pcs_manifest, wait_for


def cli(*args: str, address: str, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address, **(extra_env or {})}
    return subprocess.run([sys.executable, "-m", "worker.cli", *args], capture_output=True, text=True, env=env,
                          timeout=60)


def cluster_kubeconfig(namespace: str) -> str:
    """A kubeconfig whose current context's namespace is `namespace` (the CLI reads nothing else of it here)."""
    with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig", delete=False) as path:
        yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "c",
                        "contexts": [{"name": "c", "context": {"cluster": "x", "user": "y", "namespace": namespace}}]},
                       path)
    return path.name


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
    assert status["paused"] is True and status["pauseReason"] == "maintenance"
    assert yaml.safe_load(cli("status", "ops", "-n", ns, "-r", "1", "-o", "yaml", address=address).stdout) == [
        {**status, "observedAt": ANY}]
    watching = subprocess.Popen([sys.executable, "-m", "worker.cli", "status", "ops", "-n", ns, "-r", "1", "-w",
                                 "--interval", "0.5", "-o", "json"], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "TEMPORAL_ADDRESS": address})
    try:
        assert watching.stdout is not None
        first = json.loads(watching.stdout.readline())
        assert first[0]["paused"] is True
        assert cli("resume", "ops", "-n", ns, "--replica", "1", address=address).returncode == 0
        second = json.loads(watching.stdout.readline())  # --watch prints the change as one more JSON line
        assert second[0]["paused"] is False and second[0]["ref"]["replica"] == 1
    finally:
        watching.terminate()
        watching.wait(timeout=10)
    # kubectl's namespace rules: the kubeconfig context's namespace when -n is absent; -A for all
    kubeconfig = cluster_kubeconfig(ns)
    from_context = cli("list", "-o", "json", address=address, extra_env={"KUBECONFIG": kubeconfig})
    assert {w["namespace"] for w in json.loads(from_context.stdout)} == {ns}, from_context.stderr
    everywhere = cli("list", "-A", "-o", "json", address=address, extra_env={"KUBECONFIG": kubeconfig})
    assert ns in {w["namespace"] for w in json.loads(everywhere.stdout)}

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
