"""The partition fault against the real kernel: a process started in a worker's cgroup cannot reach a port while the
partition holds (its packets are dropped: the connection attempt hangs, it is not refused), and reaches it again once
it is lifted; a process outside the cgroup is never affected. Skipped where the machine cannot make partitions."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from faults.partition import COMMENT, PARENT, Partitions, stale_rule

CONNECT = ("import socket, sys; s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=2); "
           "s.close()")


@pytest.fixture
def partitions() -> Iterator[Partitions]:
    try:
        made = Partitions()
    except RuntimeError as err:
        pytest.skip(f"no partitions on this machine: {err}")
    reason = made.unavailable()
    if reason is not None:
        made.cleanup()
        pytest.skip(f"no partitions on this machine: {reason}")
    yield made
    made.cleanup()


@pytest.fixture
def port() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def _connects(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode == 0:
        return "connected"
    return "timed out" if "timed out" in done.stderr else f"failed: {done.stderr.strip().splitlines()[-1]}"


def test_a_partition_drops_one_workers_packets_to_one_port_until_it_is_lifted(partitions: Partitions,
                                                                               port: int) -> None:
    client = [sys.executable, "-c", CONNECT, str(port)]
    inside = partitions.wrap("worker", client)
    assert _connects(inside) == "connected"
    partitions.drop("worker", port)
    try:
        assert _connects(inside) == "timed out", "dropped, not refused"
        assert _connects(client) == "connected", "only the worker's cgroup is cut off"
        assert _connects(partitions.wrap("worker-2", client)) == "connected", "and only this worker's"
    finally:
        partitions.heal("worker", port)
    assert _connects(inside) == "connected"


def _rules() -> str:
    return subprocess.run(["iptables", "-w", "-S", "OUTPUT"], capture_output=True, text=True, check=True).stdout


def test_a_run_sweeps_the_drop_rules_a_dead_run_left_behind_and_keeps_live_ones(partitions: Partitions,
                                                                                port: int) -> None:
    """A run killed without its cleanup leaves its rule; the next run's sweep removes it (its runner's PID is gone)
    and keeps the rules of runs that go on (here, this test's own)."""
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True)
    dead = Partitions()
    dead.run = f"{PARENT}/{ended.stdout.strip()}-{dead.run.rsplit('-', 1)[1]}"  # as if that process had run it
    dead.wrap("worker", ["true"])  # makes its cgroup
    dead.drop("worker", port)
    partitions.wrap("worker", ["true"])
    partitions.drop("worker", port)
    try:
        assert dead.run in _rules() and partitions.run in _rules()
        swept = partitions.sweep_stale()
        assert [dead.run in rule for rule in swept] == [True], swept
        assert dead.run not in _rules(), "the dead run's rule is gone"
        assert partitions.run in _rules(), "a live run's rule stays"
        assert not (partitions.root / dead.run).exists(), "and so is its empty cgroup"
    finally:
        partitions.heal("worker", port)
        dead.cleanup()


def test_only_fault_run_drop_rules_of_runs_that_ended_are_stale() -> None:
    rule = ("-A OUTPUT -p tcp -m tcp --dport 6443 -m cgroup --path \"{path}\" -m comment --comment "  # as -S prints
            f"{COMMENT} -j DROP")
    ended = {"1234-abcd1234"}
    alive = lambda run: run not in ended  # noqa: E731
    assert stale_rule(rule.format(path=f"{PARENT}/1234-abcd1234/worker"), alive) == [
        "-p", "tcp", "-m", "tcp", "--dport", "6443", "-m", "cgroup", "--path", f"{PARENT}/1234-abcd1234/worker",
        "-m", "comment", "--comment", COMMENT, "-j", "DROP"]
    assert stale_rule(rule.format(path=f"{PARENT}/5678-abcd1234/worker"), alive) is None, "a run that goes on"
    assert stale_rule(rule.format(path="other/1234-abcd1234/worker"), alive) is None, "not a fault run's cgroup"
    assert stale_rule("-A OUTPUT -p tcp --dport 22 -j DROP", alive) is None, "not ours at all"
    assert stale_rule("-P OUTPUT ACCEPT", alive) is None


# A client in the worker's cgroup with the apiserver client's socket options, idle on a connection as a watch with
# no events is: it reports how the wait ended.
IDLE_READ = """
import socket, sys, time
from activities.kubeapi import socket_options
s = socket.socket()
for level, option, value in socket_options():
    s.setsockopt(level, option, value)
s.connect(('127.0.0.1', int(sys.argv[1])))
s.settimeout(90)
print('connected', flush=True)
began = time.monotonic()
try:
    s.recv(1)
    print('closed', flush=True)
except OSError as err:  # both end as TimeoutError: the read timeout without an errno, keepalive with ETIMEDOUT
    print(f'errno {err.errno} after {time.monotonic() - began:.0f}s', flush=True)
"""


def test_the_apiserver_clients_keepalive_ends_an_idle_connection_whose_packets_are_dropped(
        partitions: Partitions) -> None:
    """A watch is an idle connection between events. When the worker's packets to the apiserver are dropped, TCP
    keepalive (activities/kubeapi.socket_options) ends it with ETIMEDOUT in about half a minute, so the watch relists
    once the link is back; without it the read would wait out its timeout (90 s here; 330 s for a real watch)."""
    import errno
    import os
    import socket
    from pathlib import Path

    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(server.accept()[0]), daemon=True).start()
    port = server.getsockname()[1]
    root = Path(__file__).resolve().parents[2]
    client = subprocess.Popen(partitions.wrap("worker", [sys.executable, "-c", IDLE_READ, str(port)]),
                              stdout=subprocess.PIPE, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    try:
        assert client.stdout is not None and client.stdout.readline().strip() == "connected"
        partitions.drop("worker", port)
        out, _ = client.communicate(timeout=120)
        assert out.startswith(f"errno {errno.ETIMEDOUT} after"), out
    finally:
        partitions.heal("worker", port)
        if client.poll() is None:
            client.kill()
        for connection in held:
            connection.close()
        server.close()


def test_every_apiserver_client_carries_the_keepalive_options(tmp_path: object) -> None:
    """The options proven above are the ones the worker's clients open their connections with."""
    from pathlib import Path

    from activities.kubeapi import api_client, socket_options

    kubeconfig = Path(str(tmp_path)) / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters: [{name: k, cluster: {server: "
                          "'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: c, "
                          "context: {cluster: k, user: u}}]\n")
    made = api_client(str(kubeconfig))
    assert made.rest_client.pool_manager.connection_pool_kw["socket_options"] == socket_options()
