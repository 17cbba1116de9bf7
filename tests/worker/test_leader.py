"""Leader election's shortcut for a worker restarted on the same machine: a Lease whose holder was a process on this
host, in this PID namespace, that no longer exists is taken at once; any doubt waits the lease out. And a leader that
is unfit to lead (its nudges fail) hands the Lease over at once."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from activities.kubeapi import LEASES, Kube
from worker.leader import PID_NAMESPACE_ANNOTATION, LeaseElector, holder_gone, pid_namespace

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

HOST = socket.gethostname()
NS = "pid:[4026531836]"


def test_only_a_holder_on_this_host_in_this_pid_namespace_whose_process_is_gone_counts_as_gone() -> None:
    dead = lambda pid: False  # noqa: E731
    alive = lambda pid: True  # noqa: E731
    assert holder_gone(f"{HOST}-4242", NS, f"{HOST}-{os.getpid()}", NS, exists=dead)
    assert not holder_gone(f"{HOST}-4242", NS, f"{HOST}-{os.getpid()}", NS, exists=alive)
    assert not holder_gone("other-host-4242", NS, f"{HOST}-{os.getpid()}", NS, exists=dead)
    assert not holder_gone(f"{HOST}-4242", "pid:[1]", f"{HOST}-{os.getpid()}", NS, exists=dead)
    assert not holder_gone(f"{HOST}-4242", "", f"{HOST}-{os.getpid()}", "", exists=dead)  # no /proc: unknown
    assert not holder_gone("worker-a", NS, f"{HOST}-{os.getpid()}", NS, exists=dead)  # a chosen identity
    assert not holder_gone(f"{HOST}-4242", NS, "worker-b", NS, exists=dead)


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _lease(kube: Kube, namespace: str, holder: str, pid_ns: str | None) -> None:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    metadata: dict[str, object] = {"name": "watcher", "namespace": namespace}
    if pid_ns is not None:
        metadata["annotations"] = {PID_NAMESPACE_ANNOTATION: pid_ns}
    kube.create(LEASES, namespace, {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": metadata,
                                    "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                                             "renewTime": now, "acquireTime": now, "leaseTransitions": 0}})


def test_a_restarted_worker_takes_a_dead_local_holders_lease_at_once_and_waits_for_a_live_one(
        kube: ApiClient, namespace: str) -> None:
    client = Kube(kube)
    me = f"{HOST}-{os.getpid()}"
    _lease(client, namespace, f"{HOST}-{_dead_pid()}", pid_namespace())
    elector = LeaseElector(client, namespace=namespace, name="watcher", identity=me)
    assert elector._try_acquire_or_renew()  # the first attempt, long before the 15 s are up
    lease = client.get(LEASES, namespace, "watcher")
    assert lease is not None and lease["spec"]["holderIdentity"] == me
    assert lease["spec"]["leaseTransitions"] == 1
    assert lease["metadata"]["annotations"][PID_NAMESPACE_ANNOTATION] == pid_namespace()

    client.delete(LEASES, namespace, "watcher")
    _lease(client, namespace, f"{HOST}-{os.getppid()}", pid_namespace())  # alive: our parent
    assert not LeaseElector(client, namespace=namespace, name="watcher", identity=me)._try_acquire_or_renew()
    client.delete(LEASES, namespace, "watcher")
    _lease(client, namespace, f"{HOST}-{_dead_pid()}", None)  # an older worker that did not record its namespace
    assert not LeaseElector(client, namespace=namespace, name="watcher", identity=me)._try_acquire_or_renew()


async def test_a_leader_that_becomes_unfit_hands_the_lease_to_another_worker_at_once(
        kube: ApiClient, namespace: str) -> None:
    """The leader's nudges stop reaching Temporal (`unfit` says so): it steps down and releases the Lease, and the
    other worker takes it at its next attempt, well before the lease would have run out."""
    client = Kube(kube)
    first = LeaseElector(client, namespace=namespace, name="watcher", identity="first", lease_seconds=6,
                         renew_every=0.2, retry_every=0.2)
    second = LeaseElector(client, namespace=namespace, name="watcher", identity="second", lease_seconds=6,
                          renew_every=0.2, retry_every=0.2)
    reason: list[str] = []
    terms: list[str] = []

    async def lead(name: str) -> None:
        terms.append(name)
        await asyncio.Event().wait()

    stop = asyncio.Event()
    running = [asyncio.create_task(first.run(lambda: lead("first"), stop, unfit=lambda: reason[0] if reason else None))]
    try:
        for _ in range(50):
            if first.is_leader:
                break
            await asyncio.sleep(0.1)
        assert first.is_leader
        running.append(asyncio.create_task(second.run(lambda: lead("second"), stop)))
        await asyncio.sleep(1.0)
        assert first.is_leader and not second.is_leader, "a fit leader keeps the Lease"
        reason.append("no nudge has reached Temporal for 5s")
        handed = time.monotonic()
        while not second.is_leader:
            assert time.monotonic() - handed < 3, "the other worker took the Lease long before it could expire"
            await asyncio.sleep(0.05)
        assert not first.is_leader
        await asyncio.sleep(1.0)
        assert second.is_leader and not first.is_leader, "the one that stepped down sits out"
        assert terms == ["first", "second"]
    finally:
        stop.set()
        await asyncio.gather(*running, return_exceptions=True)


def test_a_leader_renews_with_one_request_and_reads_again_once_someone_else_wrote(
        kube: ApiClient, namespace: str) -> None:
    """The Lease is renewed every second: a renewal is one PUT from the leader's own last write, no GET. A write by
    anyone else (409) sends it back to reading and deciding."""
    calls: list[str] = []

    class Counted(Kube):
        def get(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append("get")
            return super().get(*args, **kwargs)

        def replace(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            calls.append("put")
            return super().replace(*args, **kwargs)

    client = Counted(kube)
    elector = LeaseElector(client, namespace=namespace, name="renew", identity=f"{HOST}-{os.getpid()}")
    assert elector._try_acquire_or_renew()
    elector.is_leader = True
    calls.clear()
    for _ in range(3):
        assert elector._try_acquire_or_renew()
    assert calls == ["put"] * 3

    lease = client.get(LEASES, namespace, "renew")
    assert lease is not None
    lease["spec"]["holderIdentity"] = "someone-else"
    client.replace(LEASES, namespace, "renew", lease)
    assert not elector._try_acquire_or_renew(), "someone else holds it now, and it has not expired"


def test_the_leader_s_record_rides_on_every_lease_write_and_leaves_other_annotations_alone(
        kube: ApiClient, namespace: str) -> None:
    """What the watcher gives the elector to record (its nudge watermark) is written on the Lease when it is
    taken, with each renewal (no extra request) and when it is handed back; annotations it does not give, the PID
    namespace and anyone else's, stay as they are. Until it has a record, an earlier leader's stays in place."""
    client = Kube(kube)
    _lease(client, namespace, "", None)
    lease = client.get(LEASES, namespace, "watcher")
    assert lease is not None
    lease["metadata"]["annotations"] = {"example.com/kept": "yes", "grove-temporal.io/nudged-through": '{"Pod":5}'}
    client.replace(LEASES, namespace, "watcher", lease)
    record: dict[str, str] = {}
    elector = LeaseElector(client, namespace=namespace, name="watcher", identity=f"{HOST}-{os.getpid()}",
                           annotations=lambda: dict(record))

    def annotations() -> dict[str, str]:
        return dict(((client.get(LEASES, namespace, "watcher") or {}).get("metadata") or {}).get("annotations") or {})

    assert elector._try_acquire_or_renew()
    assert annotations() == {"example.com/kept": "yes", "grove-temporal.io/nudged-through": '{"Pod":5}',
                             PID_NAMESPACE_ANNOTATION: pid_namespace()}
    elector.is_leader = True
    record["grove-temporal.io/nudged-through"] = '{"Pod":9}'
    assert elector._try_acquire_or_renew()
    assert annotations()["grove-temporal.io/nudged-through"] == '{"Pod":9}'
    assert annotations()["example.com/kept"] == "yes"
    record["grove-temporal.io/nudged-through"] = '{"Pod":12}'
    elector._release()
    released = client.get(LEASES, namespace, "watcher") or {}
    assert released["spec"].get("holderIdentity") is None
    assert annotations()["grove-temporal.io/nudged-through"] == '{"Pod":12}'

    def broken() -> dict[str, str]:
        raise RuntimeError("no record")

    elector.annotations = broken  # a record that cannot be made costs nothing but itself
    assert elector._try_acquire_or_renew()
    assert annotations()["grove-temporal.io/nudged-through"] == '{"Pod":12}'
