"""The watcher against the real apiserver and Temporal: it keeps following changes across the leadership cycle the
elector puts it through (run, cancelled when the lease is lost, run again when it is regained), and a nudge it could
not deliver while Temporal was down reaches the workflow once Temporal is back."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from activities.kubeapi import PODCLIQUESETS, Kube, slim
from activities.metrics import NUDGE_TIMINGS
from grove import names
from tests.localstack.stack_proof_workflows import (
    NudgeCountWorkflow,
    NudgeVersionsWorkflow,
    PcsChangedWorkflow,
)
from worker import watcher as watcher_module
from worker.telemetry import client_interceptors
from worker.watcher import Nudger, Watcher
from workflows.contract import ReplicaKey, reconciler_workflow_id

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack
    from localstack.temporal import TemporalDevServer


def _pcs(name: str) -> dict[str, object]:
    clique = {"name": "c", "spec": {"roleName": "c", "replicas": 1, "minAvailable": 1,
                                    "podSpec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET, "metadata": {"name": name},
            "spec": {"replicas": 0, "template": {"cliques": [clique]}}}


async def _query(handle: WorkflowHandle[Any, Any], query: Any, timeout: float = 15.0) -> Any:
    """The test's own read of a workflow, retried while the Temporal dev server answers Unavailable: under a full
    test run its SQLite store has failed reads for seconds ("GetCurrentExecution operation failed. Error:
    interrupted", CI on e015533), which the client's own retries outlasted only at times."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await handle.query(query)
        except RPCError as exc:
            if exc.status != RPCStatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.5)


async def _until(predicate: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_the_watcher_follows_changes_again_after_losing_and_regaining_the_lease(
        kube: ApiClient, crds: list[str], namespace: str, temporal_client: Client) -> None:
    client = Kube(kube)
    watcher = Watcher(client, temporal_client, namespace=namespace)

    async def lead_once(pcs: str) -> None:
        """One leadership term: run, see a new PodCliqueSet, lose the lease (the elector cancels the run)."""
        term = asyncio.create_task(watcher.run())
        try:
            await _until(lambda: watcher.leading, "the term to begin")
            client.create(PODCLIQUESETS, namespace, _pcs(pcs))
            await _until(lambda: (namespace, pcs) in watcher.pcs_feed.known, f"the watcher to see {pcs}")
        finally:
            term.cancel()
            await asyncio.gather(term, return_exceptions=True)

    try:
        await lead_once("first-term")
        await lead_once("second-term")  # before the fix its threads ended at once: nothing was watched any more
        # Between terms the watches go on (a standby stays warm); what changes then is remembered for the next term.
        client.create(PODCLIQUESETS, namespace, _pcs("between-terms"))
        await _until(lambda: (namespace, "between-terms") in watcher.pcs_feed.known, "the standby to see it")
        assert not watcher.leading
    finally:
        watcher.close()


# The Temporal client retries a call for ~11 s (10 retries, backoff 0.1 s x 1.5 up to 5 s): an outage longer than that
# makes the signal fail for good.
TEMPORAL_DOWN_S = 15


async def test_a_nudge_that_fails_while_temporal_is_down_arrives_once_it_is_back(
        stack: LocalStack, tmp_path: Path) -> None:
    server = stack.add_temporal_server(f"temporal-nudges-{uuid.uuid4().hex[:6]}", db_file=tmp_path / "temporal.db")
    try:
        client = await Client.connect(server.address, data_converter=pydantic_data_converter)  # as the worker's
        async with Worker(client, task_queue="nudges", workflows=[NudgeCountWorkflow]):
            handle = await client.start_workflow(NudgeCountWorkflow.run, id="replica", task_queue="nudges")
            nudger = Nudger(client)
            sending = asyncio.create_task(nudger.run())
            try:
                await asyncio.to_thread(server.stop)
                nudger.request("replica")  # e.g. a pod turned NotReady while Temporal was restarting
                await asyncio.sleep(TEMPORAL_DOWN_S)
                assert nudger.failing_since is not None, "the failed send is on record (the elector asks)"
                await asyncio.to_thread(server.start)
                await asyncio.to_thread(server.wait_ready)
                deadline = time.monotonic() + 30
                nudges = 0
                while nudges == 0 and time.monotonic() < deadline:
                    nudges = await _query(handle, NudgeCountWorkflow.nudges)
                    await asyncio.sleep(0.5)
                assert nudges == 1, "the nudge was dropped: the workflow never heard of the change"
                assert nudger.failing_since is None, "a send that worked clears the record"
            finally:
                sending.cancel()
                await asyncio.gather(sending, return_exceptions=True)
            await handle.signal(NudgeCountWorkflow.done)
            assert await handle.result() == 1
    finally:
        server.stop()


async def test_nudges_carry_the_resource_versions_of_their_events_through_temporal(stack: LocalStack) -> None:
    """The versions travel as a header on the worker's own client and reach the handler's Nudge; while a nudge is in
    flight further events coalesce into one, at the newest version of each kind; an event without a version makes
    the coalesced nudge a clock-judged one (no versions)."""
    client = await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter,
                                  interceptors=client_interceptors())  # as the worker's
    queue = f"versions-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[NudgeVersionsWorkflow]):
        handle = await client.start_workflow(NudgeVersionsWorkflow.run, id=f"replica-{queue}", task_queue=queue)
        nudger = Nudger(client, coalesce_seconds=0.2)
        sending = asyncio.create_task(nudger.run())
        received: list[dict[str, int] | None] = []

        async def received_count(count: int) -> None:
            deadline = time.monotonic() + 15
            while len(received) < count:
                assert time.monotonic() < deadline, f"nudges received: {received}"
                await asyncio.sleep(0.1)
                received[:] = await _query(handle, NudgeVersionsWorkflow.received)

        try:
            nudger.request(handle.id, {"Pod": 10})
            nudger.request(handle.id, {"Pod": 12, "PodClique": 3})  # within the coalescing window: one nudge
            nudger.request(handle.id, {"Pod": 11})
            await received_count(1)
            nudger.request(handle.id, {"PodCliqueSet": 5})
            nudger.request(handle.id, None)  # a deletion seen only by a relist
            await received_count(2)
        finally:
            sending.cancel()
            await asyncio.gather(sending, return_exceptions=True)
        assert received == [{"Pod": 12, "PodClique": 3}, None]
        await handle.terminate()


class HeldProxy:
    """A TCP forwarder to Temporal whose forwarding can be held: bytes wait in both directions, as behind a link that
    drops packets (TCP would retransmit them once it heals), and flow again when released."""

    def __init__(self, target: str) -> None:
        self.host, port = target.rsplit(":", 1)
        self.port = int(port)
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._connection, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)

        async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                await self.flowing.wait()
                sink.write(data)
                await sink.drain()
            sink.close()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer), return_exceptions=True)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


@contextlib.asynccontextmanager
async def _held_link(server: TemporalDevServer, workflow_cls: Any, workflow_id: str,
                     task: Callable[[Client], Awaitable[None]]) -> AsyncIterator[tuple[WorkflowHandle[Any, Any], HeldProxy]]:
    """A workflow on a worker that reaches Temporal directly, and `task` (the sender under test) running on a client
    whose link to Temporal goes through a HeldProxy; everything stopped and the link released on the way out.

    `server` is the module's own dev server, not the stack's: late in a full test run, after the held requests the
    client had given up on reached the stack's server at once, its SQLite store failed reads ("GetCurrentExecution
    operation failed. Error: interrupted (9)") for longer than the test waited, and the worker's poller with them
    (CI on 44825fc). A small store of its own has not shown it."""
    direct = await Client.connect(server.address, data_converter=pydantic_data_converter,
                                  interceptors=client_interceptors())  # the worker's side reads the header
    proxy = HeldProxy(server.address)
    through = await Client.connect(await proxy.start(), data_converter=pydantic_data_converter,
                                   interceptors=client_interceptors())
    queue = f"held-{uuid.uuid4().hex[:6]}"
    try:
        async with Worker(direct, task_queue=queue, workflows=[workflow_cls]):
            handle = await direct.start_workflow(workflow_cls.run, id=workflow_id, task_queue=queue)
            sending = asyncio.create_task(task(through))
            try:
                yield handle, proxy
            finally:
                sending.cancel()
                await asyncio.gather(sending, return_exceptions=True)
                proxy.flowing.set()
            await handle.terminate()
    finally:
        proxy.close()


async def test_a_nudge_sent_into_a_held_connection_fails_at_its_deadline_and_arrives_once_it_flows(
        dev_server: TemporalDevServer) -> None:
    """A signal with no deadline waits as long as the link holds its packets; the Nudger's deadline makes it fail,
    puts the failure on record (the elector may hand the Lease over) and sends it again until it arrives."""
    nudgers: list[Nudger] = []

    async def send(through: Client) -> None:
        nudgers.append(Nudger(through, rpc_timeout=timedelta(seconds=2), retry_seconds=0.5))
        await nudgers[0].run()

    async with _held_link(dev_server, NudgeVersionsWorkflow, f"replica-{uuid.uuid4().hex[:6]}", send) as (handle, proxy):
        await _until(lambda: bool(nudgers), "the nudger to start")
        nudger = nudgers[0]
        proxy.flowing.clear()
        held = time.monotonic()
        nudger.request(handle.id, {"Pod": 7})
        await _until(lambda: nudger.failing_since is not None, "the held nudge to fail at its deadline")
        assert time.monotonic() - held < 6
        assert await _query(handle, NudgeVersionsWorkflow.received) == []
        proxy.flowing.set()
        received: list[dict[str, int] | None] = []

        async def arrived() -> bool:
            received[:] = await _query(handle, NudgeVersionsWorkflow.received)
            return bool(received)

        deadline = time.monotonic() + 20
        while not await arrived():
            assert time.monotonic() < deadline, "the nudge never arrived once the link flowed"
            await asyncio.sleep(0.2)
        await _until(lambda: nudger.failing_since is None, "a send that worked to clear the record")
        assert set(map(str, received)) == {str({"Pod": 7})}, received  # sent again, maybe twice: harmless


async def test_a_pcs_change_whose_reconciler_signal_fails_is_kept_and_sent_once_the_link_flows(
        dev_server: TemporalDevServer) -> None:
    """The leader tells the reconciler which PodCliqueSets changed. A signal that fails (Temporal cut off) keeps its
    batch and is sent again: dropped, the change (a new template: a rolling update) would wait for the reconciler's
    full pass, ten minutes later."""
    namespace = f"ns-{uuid.uuid4().hex[:6]}"
    watchers: list[Watcher] = []

    async def notify(through: Client) -> None:
        watchers.append(Watcher(None, through, namespace=namespace, rpc_timeout=timedelta(seconds=1)))  # type: ignore[arg-type]
        await watchers[0]._notify_reconciler()

    async with _held_link(dev_server, PcsChangedWorkflow, reconciler_workflow_id(namespace), notify) as (handle, proxy):
        await _until(lambda: bool(watchers), "the watcher to start")
        watcher = watchers[0]
        proxy.flowing.clear()
        watcher.tell_reconciler((namespace, "a"))
        await asyncio.sleep(3)  # the first send fails at its 1 s deadline; the retry waits too
        assert await _query(handle, PcsChangedWorkflow.received) == []
        # A later change joins the kept batch (and wakes the sender: the retry that was held may have gone through
        # once the link flowed, leaving nothing kept to retry).
        watcher.tell_reconciler((namespace, "b"))
        proxy.flowing.set()
        received: list[list[str]] = []
        deadline = time.monotonic() + 20
        while {tuple(k) for k in received} != {(namespace, "a"), (namespace, "b")}:
            assert time.monotonic() < deadline, f"the kept batch never arrived: {received}"
            await asyncio.sleep(0.2)
            received = await _query(handle, PcsChangedWorkflow.received)


def test_a_standby_remembers_what_changed_and_nudges_it_when_it_takes_over() -> None:
    """Pure logic: while another worker leads, changes are only remembered; taking over nudges those within the
    hand-over window (the old leader may have died with them unsent), each once, at the newest versions."""
    watcher = Watcher(None, None, handover_window_seconds=60)  # type: ignore[arg-type]
    requested: list[tuple[str, dict[str, int] | None]] = []
    watcher.nudger.request = (  # type: ignore[method-assign]
        lambda wid, versions=None, status_only=False: requested.append((wid, versions)))
    watcher._nudge("a", {"Pod": 5})
    watcher._nudge("a", {"Pod": 7, "PodClique": 2})
    watcher._nudge("b", None)  # an item of a relist: judged by the clock
    watcher._touched["long-ago"] = (time.monotonic() - 61, {"Pod": 1})
    assert requested == [], "a standby nudges nothing"
    watcher.leading = True
    asyncio.run(watcher._take_over())
    assert sorted(requested, key=lambda r: r[0]) == [("a", {"Pod": 7, "PodClique": 2}), ("b", None)]
    watcher._nudge("c", {"Pod": 9})
    assert requested[-1] == ("c", {"Pod": 9}) and watcher._touched == {}, "the leader nudges at once"


def test_a_standby_taking_over_leaves_alone_the_changes_the_previous_leaders_watermark_shows_delivered() -> None:
    """Pure logic: the Lease carries the previous leader's watermark (it wrote it with its last renewal); a change
    the standby remembers at or below it was nudged and delivered by that leader, so taking over nudges only the
    newer ones, and those the watermark says nothing of. A watermark ahead of what the standby's cache has listed
    is not trusted: everything is nudged."""
    def taking_over(lease_watermark: dict[str, int]) -> list[str]:
        watcher = Watcher(None, None, handover_window_seconds=60,  # type: ignore[arg-type]
                          last_watermark=lambda: lease_watermark)
        watcher.cache.versions = lambda: {"Pod": 20, "PodClique": 20}  # type: ignore[method-assign]
        requested: list[str] = []
        watcher.nudger.request = (  # type: ignore[method-assign]
            lambda wid, versions=None, status_only=False: requested.append(wid))
        watcher._nudge("delivered", {"Pod": 9, "PodClique": 3})
        watcher._nudge("newer", {"Pod": 11})
        watcher._nudge("other-kind", {"PodCliqueSet": 2})
        watcher._nudge("unversioned", None)
        watcher.leading = True
        asyncio.run(watcher._take_over())
        return sorted(requested)

    assert taking_over({"Pod": 10, "PodClique": 10}) == ["newer", "other-kind", "unversioned"]
    assert taking_over({"Pod": 30, "PodClique": 10}) == ["delivered", "newer", "other-kind", "unversioned"], \
        "a watermark ahead of the cluster skips nothing"


def _replica_object(kind: str, name: str, rv: int, *, gated: bool = False, node: str | None = None,
                    ready: bool = False) -> dict[str, Any]:
    labels = {names.LABEL_MANAGED_BY: names.MANAGED_BY, names.LABEL_PART_OF: "p", names.LABEL_PCS_REPLICA_INDEX: "0"}
    obj: dict[str, Any] = {"kind": kind, "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}",
                                                      "resourceVersion": str(rv), "labels": labels}}
    if kind == "Pod":
        obj["spec"] = {"schedulingGates": [{"name": names.SCHEDULING_GATE}] if gated else [], "nodeName": node}
        obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}] if ready else []}
    else:
        obj["spec"] = {"replicas": 1}
    return obj


def test_the_workflows_own_steps_wake_nobody_and_everything_else_does() -> None:
    """Pure logic: creations of our objects and a gate removed with nothing else changed are the workflow's own steps
    (the activity that took them tells it); scheduling, readiness and deletions nudge, and so does anything a relist
    found (its cause is unknown)."""
    watcher = Watcher(None, None)  # type: ignore[arg-type]
    watcher.leading = True
    nudged: list[int | None] = []
    watcher.nudger.request = (  # type: ignore[method-assign]
        lambda wid, versions=None, status_only=False: nudged.append(None if versions is None
                                                                     else max(versions.values())))
    pcs = {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": "p", "uid": "pcs-uid", "generation": 1}}
    watcher.pcs_feed.known[("ns", "p")] = ((), pcs)
    pod, pclq = watcher.pod_feed, watcher.pclq_feed

    watcher._on_event(pclq, "ADDED", _replica_object("PodClique", "p-0-a", 1))
    watcher._on_event(pod, "ADDED", _replica_object("Pod", "p-0-a-0", 2, gated=True))
    watcher._on_event(pod, "MODIFIED", _replica_object("Pod", "p-0-a-0", 3))  # our gate release
    assert nudged == [], "the workflow's own steps"
    watcher._on_event(pod, "MODIFIED", _replica_object("Pod", "p-0-a-0", 4, node="n1"))
    watcher._on_event(pod, "MODIFIED", _replica_object("Pod", "p-0-a-0", 5, node="n1", ready=True))
    watcher._on_event(pod, "DELETED", _replica_object("Pod", "p-0-a-0", 6, node="n1", ready=True))
    assert nudged == [4, 5, 6], "scheduled, Ready, deleted"

    nudged.clear()
    watcher._on_event(pod, "ADDED", _replica_object("Pod", "p-0-a-1", 7, gated=True))
    watcher._on_event(pod, "MODIFIED", _replica_object("Pod", "p-0-a-1", 8, node="n1"))  # ungated and bound at once
    watcher._on_event(pod, "ADDED", _replica_object("Pod", "p-0-a-2", 9, gated=True), listed_at="12")
    watcher._on_event(pclq, "MODIFIED", _replica_object("PodClique", "p-0-a", 10) | {"spec": {"replicas": 2}})
    assert nudged == [8, None, 10], "more than the gate changed; found by a relist; a PodClique scaled"

    nudged.clear()
    # A deletion found by a relist carries no version either: the last one this process saw of the pod may be one the
    # workflow's read already covers, and the nudge would find nothing new.
    watcher._on_event(pod, "DELETED", _replica_object("Pod", "p-0-a-2", 9, gated=True), listed_at="30")
    assert nudged == [None]


def test_a_podcliqueset_created_while_watched_tells_the_reconciler_and_nudges_no_replica() -> None:
    """Pure logic: a PCS a watch event shows created has no replica workflow yet (its uid is in their ids): the
    reconciler is told, and no nudge goes to a workflow that cannot exist. Its later changes nudge its replicas, and
    so does a PCS a relist finds new (workflows of it may have started while the watch was down)."""
    watcher = Watcher(None, None)  # type: ignore[arg-type]
    watcher.leading = True
    nudged: list[str] = []
    watcher.nudger.request = (  # type: ignore[method-assign]
        lambda wid, versions=None, status_only=False: nudged.append(wid))

    def pcs(name: str, replicas: int, rv: int) -> dict[str, Any]:
        return {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}",
                                                     "generation": replicas, "resourceVersion": str(rv)},
                "spec": {"replicas": replicas}}

    watcher._on_event(watcher.pcs_feed, "ADDED", pcs("p", 2, 1))
    assert watcher._pending_pcs == {("ns", "p")} and nudged == []

    watcher._on_event(watcher.pcs_feed, "MODIFIED", pcs("p", 3, 2))  # scaled out
    assert nudged == [ReplicaKey("ns", "p", "uid-p", i).workflow_id for i in (0, 1, 0, 1, 2)]

    nudged.clear()
    watcher._on_event(watcher.pcs_feed, "ADDED", pcs("q", 1, 5), "9", True)  # found by a later list
    assert nudged == [ReplicaKey("ns", "q", "uid-q", 0).workflow_id]


def test_a_first_list_nudges_whole_replicas_with_their_items_versions_and_the_rest_for_a_fresh_read() -> None:
    """Pure logic: a process that remembers nothing cannot see what was deleted while it was away, so the items of
    its first lists are held until every kind is listed; then a replica the cache shows whole is nudged with its
    items' own versions (a read of the cache answers it, or nothing at all if the workflow has read them already),
    any other for a read from kube-apiserver. Watch events are nudged as they come, and later lists as before."""
    tested: list[str] = []

    def drift_of(key: ReplicaKey) -> tuple[str, ...] | None:
        tested.append(f"{key.pcs}/{key.replica}")
        return {0: (), 1: ("missing pods p-1-a-1",), 2: None}[key.replica]

    watcher = Watcher(None, None, first_list_drift=drift_of)  # type: ignore[arg-type]
    watcher.leading = True
    nudged: list[tuple[str, dict[str, int] | None]] = []
    watcher.nudger.request = (  # type: ignore[method-assign]
        lambda wid, versions=None, status_only=False: nudged.append((wid, versions)))
    pcs: dict[str, Any] = {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": "p", "uid": "pcs-uid",
                                                                "generation": 1, "resourceVersion": "3"},
                           "spec": {"replicas": 3}}
    pod, pclq = watcher.pod_feed, watcher.pclq_feed
    listed = "100"

    def item(kind: str, name: str, rv: int, replica: int) -> dict[str, Any]:
        obj = _replica_object(kind, name, rv)
        obj["metadata"]["labels"][names.LABEL_PCS_REPLICA_INDEX] = str(replica)
        return obj

    watcher._on_event(watcher.pcs_feed, "ADDED", pcs, listed)
    # The reconciler is told only of a PCS whose generation its status does not show observed (created or changed
    # while no worker watched); one it has reconciled is left alone, unless the Grove operator's finalizer is on it.
    for name, status, finalizers in (("settled", {"observedGeneration": 4}, []),
                                     ("changed", {"observedGeneration": 3}, []),
                                     ("claimed", {"observedGeneration": 4}, [names.GROVE_OPERATOR_PCS_FINALIZER])):
        other = {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}",
                                                      "generation": 4, "resourceVersion": "4",
                                                      "finalizers": finalizers},
                 "spec": {"replicas": 0}, "status": status}
        watcher._on_event(watcher.pcs_feed, "ADDED", other, listed)
    assert watcher._pending_pcs == {("ns", "p"), ("ns", "changed"), ("ns", "claimed")}
    for replica in range(3):
        watcher._on_event(pclq, "ADDED", item("PodClique", f"p-{replica}-a", 10 + replica, replica), listed)
        watcher._on_event(pod, "ADDED", item("Pod", f"p-{replica}-a-0", 20 + replica, replica), listed)
    watcher._on_event(pod, "MODIFIED", _replica_object("Pod", "p-0-a-0", 50, ready=True))  # a watch event: at once
    assert nudged == [(ReplicaKey("ns", "p", "pcs-uid", 0).workflow_id, {"Pod": 50})] and tested == []

    nudged.clear()
    asyncio.run(_first_lists_done(watcher))
    assert sorted(tested) == ["p/0", "p/1", "p/2"]
    assert sorted(nudged) == [
        (ReplicaKey("ns", "p", "pcs-uid", 0).workflow_id, {"PodCliqueSet": 3, "PodClique": 10, "Pod": 20}),
        (ReplicaKey("ns", "p", "pcs-uid", 1).workflow_id, None),  # drift: something may have been deleted
        (ReplicaKey("ns", "p", "pcs-uid", 2).workflow_id, None),  # the cache could not say
    ]

    nudged.clear()
    watcher._on_event(pod, "ADDED", item("Pod", "p-2-a-1", 60, 2), "120", True)  # a later list: as before
    assert nudged == [(ReplicaKey("ns", "p", "pcs-uid", 2).workflow_id, None)] and len(tested) == 3


def test_a_first_list_leaves_alone_a_whole_replica_the_previous_leader_s_watermark_covers() -> None:
    """Pure logic: a replica the cache shows whole, whose items are all at or below the previous leader's nudge
    watermark, had every change delivered by that leader: not nudged at all (so the restarted worker does not replay
    it). One item above it, or a replica not whole, is nudged as before. A watermark ahead of what this process
    listed (another cluster's, an etcd restored from a backup) or one lacking a kind is not trusted for it."""
    zero = ReplicaKey("ns", "p", "pcs-uid", 0).workflow_id

    class Visibility:
        """The running replica workflows, as Temporal's visibility lists them; None: the query fails."""

        def __init__(self, running: list[str] | None) -> None:
            self.running = running

        def list_workflows(self, query: str, **_: Any) -> AsyncIterator[Any]:
            assert "ReplicaWorkflow" in query and "Running" in query, query

            async def executions() -> AsyncIterator[Any]:
                if self.running is None:
                    raise RPCError("visibility unavailable", RPCStatusCode.UNAVAILABLE, b"")
                for workflow_id in self.running:
                    yield SimpleNamespace(id=workflow_id)
            return executions()

    def first_list(lease: dict[str, int] | None, listed: dict[str, int],
                   running: list[str] | None = [zero]) -> tuple[list[Any], Watcher]:  # noqa: B006 - never changed
        watcher = Watcher(None, Visibility(running),  # type: ignore[arg-type]
                          first_list_drift=lambda key: ("missing pods",) if key.replica == 2 else (),
                          last_watermark=lambda: lease)
        watcher.cache.versions = lambda: listed  # type: ignore[method-assign]
        watcher.leading = True
        nudged: list[Any] = []
        watcher.nudger.request = (  # type: ignore[method-assign]
            lambda wid, versions=None, status_only=False: nudged.append((int(wid.split("/")[-1]), versions)))
        pcs = {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": "p", "uid": "pcs-uid", "generation": 1,
                                                    "resourceVersion": "3"},
               "spec": {"replicas": 3}, "status": {"observedGeneration": 1}}
        watcher._on_event(watcher.pcs_feed, "ADDED", pcs, "100")
        for replica, (pclq_rv, pod_rv) in enumerate(((10, 20), (11, 25), (12, 21))):
            for feed, kind, name, rv in ((watcher.pclq_feed, "PodClique", f"p-{replica}-a", pclq_rv),
                                         (watcher.pod_feed, "Pod", f"p-{replica}-a-0", pod_rv)):
                obj = _replica_object(kind, name, rv)
                obj["metadata"]["labels"][names.LABEL_PCS_REPLICA_INDEX] = str(replica)
                watcher._on_event(feed, "ADDED", obj, "100")
        asyncio.run(_first_lists_done(watcher))
        return sorted(nudged, key=lambda n: n[0]), watcher

    listed = {"PodCliqueSet": 100, "PodClique": 100, "Pod": 100}
    mark = {"PodCliqueSet": 3, "PodClique": 12, "Pod": 22}
    nudged, watcher = first_list(mark, listed)
    assert nudged == [(1, {"PodCliqueSet": 3, "PodClique": 11, "Pod": 25}),  # its pod changed after the watermark
                      (2, None)]  # not whole: something may have been deleted, whatever the versions say
    assert watcher._pending_pcs == set()  # replica 0's workflow runs: the reconciler has nothing to do
    # No nudge can find a workflow gone while no worker ran (terminated from the UI): visibility does, and the
    # reconciler is told. If visibility cannot be asked, the replica is nudged after all.
    nudged, watcher = first_list(mark, listed, running=[])
    assert [n[0] for n in nudged] == [1, 2] and watcher._pending_pcs == {("ns", "p")}
    nudged, watcher = first_list(mark, listed, running=None)
    assert nudged[0] == (0, {"PodCliqueSet": 3, "PodClique": 10, "Pod": 20}) and len(nudged) == 3
    every = [(0, {"PodCliqueSet": 3, "PodClique": 10, "Pod": 20}), (1, {"PodCliqueSet": 3, "PodClique": 11, "Pod": 25}),
             (2, None)]
    assert first_list({"PodCliqueSet": 3, "PodClique": 12, "Pod": 200}, listed)[0] == every  # ahead of this cluster
    assert first_list({"PodCliqueSet": 3, "Pod": 22}, listed)[0] == every  # says nothing of PodCliques
    assert first_list(None, listed)[0] == every  # no watermark: as before


async def test_the_watermark_moves_only_when_every_change_heard_has_been_nudged() -> None:
    """Pure logic: while leading, the watcher takes what its cache has handed on as its watermark at a moment when
    nothing is pending, held or in flight; the elector writes it on the Lease."""
    watcher = Watcher(None, None)  # type: ignore[arg-type]
    watcher._first_list = None
    handed = {"Pod": 40}
    watcher.cache.versions = lambda: dict(handed)  # type: ignore[method-assign]
    assert watcher.lease_annotations() == {}
    keeping = asyncio.create_task(watcher._keep_watermark())
    try:
        await _until(lambda: watcher.watermark == {"Pod": 40}, "the first watermark", timeout=5)
        assert watcher.lease_annotations() == {"grove-temporal.io/nudged-through": '{"Pod":40}'}
        watcher.nudger._pending["wf"] = {"Pod": 41}  # a change heard, its nudge not yet delivered
        handed["Pod"] = 41
        await asyncio.sleep(3 * watcher_module.WATERMARK_EVERY_SECONDS)
        assert watcher.watermark == {"Pod": 40}
        del watcher.nudger._pending["wf"]
        watcher.nudger._held["wf"] = (0.0, {"Pod": 41})  # held for the status window: not delivered either
        await asyncio.sleep(3 * watcher_module.WATERMARK_EVERY_SECONDS)
        assert watcher.watermark == {"Pod": 40}
        del watcher.nudger._held["wf"]
        await _until(lambda: watcher.watermark == {"Pod": 41}, "the watermark moved on", timeout=5)
    finally:
        keeping.cancel()


async def _first_lists_done(watcher: Watcher) -> None:
    """What the cache's first sync calls on the loop, and the test it hands to a thread, to its end."""
    watcher._first_lists_done()
    assert watcher._testing is not None
    await watcher._testing


def _pod(name: str, rv: int, *, node: str | None = None, ready: bool = False, phase: str = "Pending",
         scaled: bool = False, waiting: bool = False, template: str = "h1", clique: str = "p-0-a",
         gated: bool = False, gang: str | None = None) -> dict[str, Any]:
    pod = _replica_object("Pod", name, rv, node=node, ready=ready, gated=gated)
    pod["status"]["phase"] = phase
    labels = pod["metadata"]["labels"]
    labels[names.LABEL_PODCLIQUE], labels[names.LABEL_POD_TEMPLATE_HASH] = clique, template
    labels[names.LABEL_PODGANG] = gang or ("p-0-g-0-1" if scaled else "p-0")
    if scaled:
        labels[names.LABEL_BASE_PODGANG] = "p-0"
    if waiting:
        pod["metadata"]["annotations"] = {names.ANNOTATION_STARTUP: names.STARTUP_WAITING}
    return pod


def test_changes_that_only_move_status_may_wait_and_the_ones_a_workflow_decides_on_do_not() -> None:
    """Pure logic: which pod changes the watcher marks status-only (the nudge may wait for the status window)."""
    watcher = Watcher(None, None)  # type: ignore[arg-type]
    watcher.leading = True
    marked: list[tuple[int, bool]] = []
    watcher.nudger.request = (  # type: ignore[method-assign]
        lambda wid, versions=None, status_only=False: marked.append((max((versions or {0: 0}).values()), status_only)))
    pcs = {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": "p", "uid": "pcs-uid", "generation": 1}}
    watcher.pcs_feed.known[("ns", "p")] = ((), pcs)
    feed = watcher.pod_feed

    def event(pod: dict[str, Any], kind: str = "MODIFIED") -> bool:
        marked.clear()
        watcher._on_event(feed, kind, pod)
        ((_, status_only),) = marked
        return status_only

    def podclique(name: str, replicas: int, min_available: int) -> None:  # as the watcher keeps what it heard
        watcher.pclq_feed.known[("ns", name)] = ((), slim({
            "metadata": {"namespace": "ns", "name": name},
            "spec": {"replicas": replicas, "minAvailable": min_available, "podSpec": {"containers": []}}}))

    podclique("p-0-a", 3, 2)
    podclique("p-0-b", 2, 2)
    podclique("r-0-a", 3, 2)
    podclique("r-0-b", 1, 1)

    for name in ("p-0-a-0", "p-0-a-1"):  # two base pods, released
        watcher._on_event(feed, "ADDED", _pod(name, 1))
    watcher._on_event(feed, "ADDED", _pod("p-0-b-0", 1, scaled=True, gated=True))  # a scaled gang's, gated
    assert event(_pod("p-0-a-0", 2, node="n1")) is True, "a base pod bound while another is not"
    assert event(_pod("p-0-a-1", 4, node="n2")) is False, \
        "the binding that leaves every base pod bound while a scaled pod waits on it"
    watcher._on_event(feed, "MODIFIED", _pod("p-0-b-0", 2, scaled=True))  # its release: the workflow's own step
    assert event(_pod("p-0-b-0", 3, node="n1", scaled=True)) is True, "a scaled pod bound"
    assert event(_pod("p-0-a-0", 5, node="n1", phase="Running")) is True, "Running"
    assert event(_pod("p-0-a-0", 6, node="n1", phase="Running", ready=True)) is True, "Ready gained"
    assert event(_pod("p-0-a-0", 7, node="n1", phase="Running")) is False, "readiness lost: a breach begins"
    assert event(_pod("p-0-a-1", 8, node="n2", phase="Failed")) is False, "failed"
    assert event(_pod("p-0-a-0", 9, node="n1", phase="Running"), "DELETED") is False, "deleted"

    watcher._on_event(feed, "ADDED", _pod("p-0-c-0", 10, waiting=True, clique="p-0-c"))
    assert event(_pod("p-0-a-1", 11, node="n2", phase="Running", ready=True)) is False, \
        "Ready gained while a pod waits for startup order"
    watcher._on_event(feed, "DELETED", _pod("p-0-c-0", 12, waiting=True, clique="p-0-c"))
    watcher._on_event(feed, "ADDED", _pod("p-0-a-2", 13, template="h2"))
    assert event(_pod("p-0-b-0", 14, node="n1", scaled=True, ready=True, clique="p-0-b")) is True, \
        "Ready gained in a PodClique of one template"
    assert event(_pod("p-0-a-1", 15, node="n2", phase="Running")) is False, "readiness lost"
    assert event(_pod("p-0-a-1", 16, node="n2", phase="Running", ready=True)) is False, \
        "Ready gained in a PodClique with pods of two templates: a rolling update waits on it"

    lone = {**pcs, "metadata": {**pcs["metadata"], "name": "q", "uid": "q-uid"}}
    watcher.pcs_feed.known[("ns", "q")] = ((), lone)
    only = _pod("q-0-a-0", 20)
    only["metadata"]["labels"][names.LABEL_PART_OF] = "q"
    watcher._on_event(feed, "ADDED", only)
    bound = _pod("q-0-a-0", 21, node="n1")
    bound["metadata"]["labels"][names.LABEL_PART_OF] = "q"
    assert event(bound) is True, "the base gang bound with no scaled gang to release: only status"
    ready = _pod("q-0-a-0", 22, node="n1", phase="Running", ready=True)
    ready["metadata"]["labels"][names.LABEL_PART_OF] = "q"
    assert event(ready) is False, "the Ready that leaves every pod of the replica Ready: Available waits on it"

    # A base PodClique with a pod past its minAvailable: that pod keeps its gate until the base gang is scheduled,
    # so the binding that completes the base gang is the one that leaves every *released* base pod bound.
    surplus = {**pcs, "metadata": {**pcs["metadata"], "name": "r", "uid": "r-uid"}}
    watcher.pcs_feed.known[("ns", "r")] = ((), surplus)

    def of_r(pod: dict[str, Any]) -> dict[str, Any]:
        pod["metadata"]["labels"][names.LABEL_PART_OF] = "r"
        return pod

    for name in ("r-0-a-0", "r-0-a-1"):
        watcher._on_event(feed, "ADDED", of_r(_pod(name, 30, clique="r-0-a")))
    watcher._on_event(feed, "ADDED", of_r(_pod("r-0-a-2", 30, clique="r-0-a", gated=True)))
    assert event(of_r(_pod("r-0-a-0", 31, node="n1", clique="r-0-a"))) is True, "one released base pod bound of two"
    assert event(of_r(_pod("r-0-a-1", 32, node="n2", clique="r-0-a"))) is False, \
        "the binding that leaves every released base pod bound while a surplus base pod waits on it"
    watcher._on_event(feed, "MODIFIED", of_r(_pod("r-0-a-2", 33, clique="r-0-a")))  # released: an own step
    assert event(of_r(_pod("r-0-a-2", 34, node="n3", clique="r-0-a"))) is True, \
        "the surplus pod bound with nothing left gated: only status"
    watcher._on_event(feed, "ADDED", of_r(_pod("r-0-b-0", 35, clique="r-0-b", scaled=True, gated=True)))
    for rv, (name, node) in enumerate((("r-0-a-0", "n1"), ("r-0-a-1", "n2"), ("r-0-a-2", "n3")), start=36):
        assert event(of_r(_pod(name, rv, node=node, phase="Running", ready=True, clique="r-0-a"))) is True, \
            "Ready while a pod of the replica is not Ready (the one that reaches minAvailable too: it rides along)"
    watcher._on_event(feed, "MODIFIED", of_r(_pod("r-0-b-0", 39, clique="r-0-b", scaled=True)))  # released
    assert event(of_r(_pod("r-0-b-0", 40, node="n1", clique="r-0-b", scaled=True))) is True, "a scaled pod bound"
    assert event(of_r(_pod("r-0-b-0", 41, node="n1", phase="Running", ready=True, clique="r-0-b",
                           scaled=True))) is False, "the last pod of the replica Ready"
    assert event(of_r(_pod("r-0-a-2", 42, node="n3", phase="Running", clique="r-0-a"))) is False, "readiness lost"
    watcher._on_event(feed, "ADDED", of_r(_pod("r-0-c-0", 43, clique="r-0-c")))  # a PodClique not heard of yet
    assert event(of_r(_pod("r-0-a-2", 44, node="n3", phase="Running", ready=True, clique="r-0-a"))) is True, \
        "Ready regained"
    assert event(of_r(_pod("r-0-c-0", 45, node="n4", phase="Running", ready=True, clique="r-0-c"))) is False, \
        "Ready in a PodClique whose minAvailable the watcher has not heard: nothing vouches for its crossing"

    # A scaled gang with a pod past its PodClique's minAvailable (kube backend): that pod keeps its gate until its
    # own gang is scheduled, so the binding that leaves every released pod of that gang bound is decided on, and a
    # binding in another gang is not.
    scaled_surplus = {**pcs, "metadata": {**pcs["metadata"], "name": "s", "uid": "s-uid"}}
    watcher.pcs_feed.known[("ns", "s")] = ((), scaled_surplus)

    def of_s(pod: dict[str, Any]) -> dict[str, Any]:
        pod["metadata"]["labels"][names.LABEL_PART_OF] = "s"
        return pod

    watcher._on_event(feed, "ADDED", of_s(_pod("s-0-a-0", 50, node="n1", clique="s-0-a")))  # the base gang, bound
    for name, gang, gated in (("s-0-g-1-w-0", "s-0-g-0-1", False), ("s-0-g-1-w-1", "s-0-g-0-1", False),
                              ("s-0-g-1-w-2", "s-0-g-0-1", True), ("s-0-g-2-w-0", "s-0-g-0-2", False)):
        watcher._on_event(feed, "ADDED", of_s(_pod(name, 51, clique=name[:-2], scaled=True, gang=gang, gated=gated)))
    assert event(of_s(_pod("s-0-g-1-w-0", 52, node="n1", clique="s-0-g-1-w", scaled=True, gang="s-0-g-0-1"))) \
        is True, "one released pod of the scaled gang bound of two"
    assert event(of_s(_pod("s-0-g-2-w-0", 53, node="n2", clique="s-0-g-2-w", scaled=True, gang="s-0-g-0-2"))) \
        is True, "another scaled gang bound whole, with no pod of its own gated: only status"
    assert event(of_s(_pod("s-0-g-1-w-1", 54, node="n2", clique="s-0-g-1-w", scaled=True, gang="s-0-g-0-1"))) \
        is False, "the binding that leaves every released pod of a scaled gang bound while its surplus pod waits"
    watcher._on_event(feed, "ADDED", of_s(_pod("s-0-g-2-w-1", 55, clique="s-0-g-2-w", scaled=True, gang="s-0-g-0-2",
                                               gated=True, waiting=True)))  # held by startup order, not binding
    watcher._on_event(feed, "ADDED", of_s(_pod("s-0-g-2-l-0", 56, clique="s-0-g-2-l", scaled=True, gang="s-0-g-0-2")))
    assert event(of_s(_pod("s-0-g-2-l-0", 57, node="n3", clique="s-0-g-2-l", scaled=True, gang="s-0-g-0-2"))) \
        is True, "a scaled gang bound whose only gated pod waits for startup order: only status"


def _leading_watcher() -> tuple[Watcher, list[bool], dict[str, Any]]:
    """A leading watcher that knows PodCliqueSet ns/p; each nudge it requests appends whether it was status-only."""
    watcher = Watcher(None, None)  # type: ignore[arg-type]
    watcher.leading = True
    marked: list[bool] = []
    watcher.nudger.request = (  # type: ignore[method-assign]
        lambda wid, versions=None, status_only=False: marked.append(status_only))
    pcs = {"kind": "PodCliqueSet", "metadata": {"namespace": "ns", "name": "p", "uid": "pcs-uid", "generation": 1}}
    watcher.pcs_feed.known[("ns", "p")] = ((), pcs)
    return watcher, marked, pcs


def test_a_binding_in_a_gang_whose_scheduling_a_nudge_already_told_is_only_status() -> None:
    """Pure logic: once a nudge went at once for the binding that left the base gang bound, the round it woke
    releases what waited on that gang. kube-scheduler may bind a surplus base pod that round released while its
    other gates are still being removed; that binding leaves every released base pod bound with pods still gated,
    yet tells the workflow nothing new (B3 at 1,000 x 17: an extra round for 15% of the replicas). A gang whose
    pods were replaced since (another UID) is news again, and so is a gang no nudge told of."""
    watcher, marked, pcs = _leading_watcher()
    feed = watcher.pod_feed

    def event(pod: dict[str, Any], kind: str = "MODIFIED") -> bool:
        marked.clear()
        watcher._on_event(feed, kind, pod)
        (status_only,) = marked
        return status_only

    for name in ("p-0-a-0", "p-0-a-1"):  # the base gang, released
        watcher._on_event(feed, "ADDED", _pod(name, 1))
    watcher._on_event(feed, "ADDED", _pod("p-0-a-2", 1, gated=True))  # a surplus base pod
    for name in ("p-0-b-0", "p-0-b-1"):  # a scaled gang's pods
        watcher._on_event(feed, "ADDED", _pod(name, 1, scaled=True, gated=True, clique="p-0-b"))
    assert event(_pod("p-0-a-0", 2, node="n1")) is True
    assert event(_pod("p-0-a-1", 3, node="n2")) is False, "the base gang bound: its workflow releases on it"
    watcher._on_event(feed, "MODIFIED", _pod("p-0-a-2", 4))  # the round's first release (its own step)
    assert event(_pod("p-0-a-2", 5, node="n3")) is True, \
        "a released pod bound while the round still removes the scaled gang's gates: the gang was told"
    for rv, name in enumerate(("p-0-b-0", "p-0-b-1"), start=6):
        watcher._on_event(feed, "MODIFIED", _pod(name, rv, scaled=True, clique="p-0-b"))
    assert event(_pod("p-0-b-0", 8, node="n1", scaled=True, clique="p-0-b")) is True

    # The base gang replaced (gang termination): the new pods' binding is news, though the old gang was told.
    for name in ("p-0-a-0", "p-0-a-1", "p-0-a-2"):
        watcher._on_event(feed, "DELETED", _pod(name, 9))
    watcher._on_event(feed, "ADDED", {**_pod("p-0-a-0", 10), "metadata": {
        **_pod("p-0-a-0", 10)["metadata"], "uid": "uid-p-0-a-0-again"}})
    watcher._on_event(feed, "ADDED", _pod("p-0-a-1", 10, gated=True))
    again = _pod("p-0-a-0", 11, node="n4")
    again["metadata"]["uid"] = "uid-p-0-a-0-again"
    assert event(again) is False, "a new incarnation of the base gang bound while a pod waits on it: news"

    # Not leading: nothing told, so the same binding stays news for whoever leads next.
    follower = Watcher(None, None)  # type: ignore[arg-type]
    follower.pcs_feed.known[("ns", "p")] = ((), pcs)
    for name, gated in (("p-0-a-0", False), ("p-0-a-1", False), ("p-0-a-2", True)):
        follower._on_event(follower.pod_feed, "ADDED", _pod(name, 1, gated=gated))
    follower._on_event(follower.pod_feed, "MODIFIED", _pod("p-0-a-0", 2, node="n1"))
    follower._on_event(follower.pod_feed, "MODIFIED", _pod("p-0-a-1", 3, node="n2"))
    assert follower._gangs_told == {}


def test_a_ready_that_ends_a_breach_goes_at_once_where_a_first_crossing_waits() -> None:
    """Pure logic: the Ready that brings a PodClique back to its minAvailable after a watch event had shown it there
    ends a breach (the workflow cancels its termination timer), so its nudge goes at once; the first time a
    PodClique reaches minAvailable, and a Ready past it, only move status and wait for the window."""
    watcher, held, _ = _leading_watcher()
    for name, replicas, min_available in (("p-0-a", 3, 2), ("p-0-b", 2, 2)):
        watcher.pclq_feed.known[("ns", name)] = ((), slim({
            "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
            "spec": {"replicas": replicas, "minAvailable": min_available}}))
    feed = watcher.pod_feed
    for name, clique in (("p-0-a-0", "p-0-a"), ("p-0-a-1", "p-0-a"), ("p-0-a-2", "p-0-a"), ("p-0-b-0", "p-0-b")):
        watcher._on_event(feed, "ADDED", _pod(name, 1, node="n1", clique=clique))

    def event(name: str, rv: int, ready: bool) -> bool:
        held.clear()
        watcher._on_event(feed, "MODIFIED", _pod(name, rv, node="n1", phase="Running", ready=ready))
        ((status_only,),) = [held]
        return status_only

    assert event("p-0-a-0", 2, True) is True, "one Ready of minAvailable 2"
    assert event("p-0-a-1", 3, True) is True, "the first crossing waits (the nudges after it carry it)"
    assert event("p-0-a-2", 4, True) is True, "a Ready past minAvailable"
    assert event("p-0-a-2", 5, False) is False, "readiness lost goes at once"
    assert event("p-0-a-2", 6, True) is True, "regained, never below minAvailable: no breach ended"
    assert event("p-0-a-1", 7, False) is False and event("p-0-a-2", 8, False) is False, "below minAvailable"
    assert event("p-0-a-2", 9, True) is False, "the Ready that ends the breach goes at once"
    assert event("p-0-a-1", 10, True) is True, "and the one past it waits again"


def test_podcliques_seen_at_min_available_ride_with_every_nudge_to_their_replica() -> None:
    """Pure logic: a watch event that shows a PodClique's Ready pods (not being deleted, of one template) at its
    minAvailable is remembered by PodClique name and UID, for every later nudge to the replica to carry, though its
    own nudge waits for the status window. So a Ready lost before the workflow read the crossing still finds it
    was available. A relist's item vouches for nothing; the replica's last pod gone, it is forgotten."""
    watcher, held, pcs = _leading_watcher()
    workflow_id = ReplicaKey("ns", "p", "pcs-uid", 0).workflow_id
    for name, replicas, min_available in (("p-0-a", 3, 2), ("p-0-b", 2, 2), ("p-0-c", 2, 1)):
        watcher.pclq_feed.known[("ns", name)] = ((), slim({
            "metadata": {"namespace": "ns", "name": name, "uid": f"uid-{name}"},
            "spec": {"replicas": replicas, "minAvailable": min_available}}))
    feed = watcher.pod_feed
    for name, clique, template in (("p-0-a-0", "p-0-a", "h1"), ("p-0-a-1", "p-0-a", "h1"), ("p-0-a-2", "p-0-a", "h1"),
                                   ("p-0-b-0", "p-0-b", "h1"), ("p-0-b-1", "p-0-b", "h2"), ("p-0-c-0", "p-0-c", "h1")):
        watcher._on_event(feed, "ADDED", _pod(name, 1, node="n1", clique=clique, template=template))

    watcher._on_event(feed, "MODIFIED", _pod("p-0-a-0", 2, node="n1", ready=True))
    assert watcher._reached_of(workflow_id) is None, "one Ready of minAvailable 2"
    gone = _pod("p-0-a-0", 3, node="n1", ready=True)
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    watcher._on_event(feed, "MODIFIED", gone)
    held.clear()
    watcher._on_event(feed, "MODIFIED", _pod("p-0-a-1", 4, node="n1", ready=True))
    assert watcher._reached_of(workflow_id) is None, "a pod being deleted does not count"
    watcher._on_event(feed, "MODIFIED", _pod("p-0-a-2", 5, node="n1", ready=True))
    assert held[-1] is True, "the crossing's own nudge still waits for the status window"
    assert watcher._reached_of(workflow_id) == {"p-0-a": "uid-p-0-a"}
    watcher._on_event(feed, "MODIFIED", _pod("p-0-a-2", 6, node="n1"))
    assert held[-1] is False, "readiness lost goes at once"
    assert watcher._reached_of(workflow_id) == {"p-0-a": "uid-p-0-a"}, "and still carries the crossing"

    for rv, name in enumerate(("p-0-b-0", "p-0-b-1"), start=7):
        watcher._on_event(feed, "MODIFIED", _pod(name, rv, node="n1", ready=True, clique="p-0-b",
                                                 template="h1" if name.endswith("0") else "h2"))
    watcher._on_event(feed, "MODIFIED", _pod("p-0-c-0", 9, node="n1", ready=True, clique="p-0-c"),
                      listed_at="9", relisted=True)
    assert watcher._reached_of(workflow_id) == {"p-0-a": "uid-p-0-a"}, \
        "neither a PodClique of two templates (a rolling update) nor an item of a relist"
    assert watcher._reached_of("grove-temporal-replica/ns/p/other-uid") is None
    watcher._on_event(feed, "MODIFIED", _pod("p-0-c-0", 10, node="n1", clique="p-0-c"))
    watcher._on_event(feed, "MODIFIED", _pod("p-0-c-0", 11, node="n1", ready=True, clique="p-0-c"))
    assert watcher._reached_of(workflow_id) == {"p-0-a": "uid-p-0-a", "p-0-c": "uid-p-0-c"}
    deleted = _replica_object("PodClique", "p-0-c", 12)
    watcher._on_event(watcher.pclq_feed, "DELETED", {**deleted, "metadata": {**deleted["metadata"], "uid": "uid-p-0-c"}})
    assert watcher._reached_of(workflow_id) == {"p-0-a": "uid-p-0-a"}, "a PodClique deleted is forgotten"

    for rv, name in enumerate(("p-0-a-0", "p-0-a-1", "p-0-a-2", "p-0-b-0", "p-0-b-1", "p-0-c-0"), start=13):
        watcher._on_event(feed, "DELETED", _pod(name, rv, node="n1"))
    assert watcher._reached_of(workflow_id) is None and not watcher._replica_reached


class _RecordingClient:
    """Stands in for the Temporal client in the Nudger's pure logic: records each signal, with its versions."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str, dict[str, int] | None]] = []
        self.reached: list[dict[str, str] | None] = []  # each signal's Nudge.reached header, as sent

    def get_workflow_handle(self, workflow_id: str) -> Any:
        client = self

        class Handle:
            async def signal(self, *args: Any, **kwargs: Any) -> None:
                from workflows.nudge_versions import (  # what the interceptor reads
                    _outgoing,
                    _outgoing_reached,
                )
                client.sent.append((time.monotonic(), workflow_id, _outgoing.get()))
                client.reached.append(_outgoing_reached.get())

        return Handle()


@contextlib.asynccontextmanager
async def _running_nudger(window: float) -> AsyncIterator[tuple[_RecordingClient, Nudger, float]]:
    """A Nudger with this status window running against a recording client; yields them and when it started."""
    client = _RecordingClient()
    nudger = Nudger(client, coalesce_seconds=0, status_window_seconds=window)  # type: ignore[arg-type]
    running = asyncio.create_task(nudger.run())
    try:
        yield client, nudger, time.monotonic()
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


def _nudge_requests() -> dict[str, float]:
    """grove_temporal_nudge_requests_total by timing, as /metrics shows it now."""
    return {timing: REGISTRY.get_sample_value("grove_temporal_nudge_requests_total", {"timing": timing}) or 0.0
            for timing in NUDGE_TIMINGS}


async def test_a_status_only_nudge_waits_for_the_window_unless_another_nudge_takes_it_along() -> None:
    counted = _nudge_requests()
    async with _running_nudger(0.3) as (client, nudger, began):
        nudger.request("a", {"Pod": 5}, status_only=True)
        nudger.request("a", {"Pod": 6}, status_only=True)
        nudger.request("b", {"Pod": 7}, status_only=True)
        await asyncio.sleep(0.1)
        assert client.sent == [], "held for the window"
        nudger.request("b", {"Pod": 8, "PodClique": 2})  # a change b's workflow decides on: at once, with b's held one
        await asyncio.sleep(0.05)
        assert [(wid, versions) for _, wid, versions in client.sent] == [("b", {"Pod": 8, "PodClique": 2})]
        await asyncio.sleep(0.3)
        assert [(wid, versions) for _, wid, versions in client.sent] == [("b", {"Pod": 8, "PodClique": 2}),
                                                                          ("a", {"Pod": 6})], "one nudge for a's two"
        assert client.sent[1][0] - began >= 0.3
        now = _nudge_requests()
        assert {timing: now[timing] - counted[timing] for timing in now} == {
            "at-once": 1, "held": 3, "window-ended": 1}, "b's held change went with b's at-once one, a's at its end"
        nudger.request("c", {"Pod": 9}, status_only=True)
    assert nudger._pending == {"c": {"Pod": 9}}, "a term that ends keeps its held nudges for the next"


async def test_a_nudge_carries_what_its_replica_s_podcliques_reached_when_it_is_sent() -> None:
    """The reached set is asked for at each send, not when the change was heard: a held nudge carries the crossings
    heard while it waited."""
    reached: dict[str, dict[str, str]] = {}
    async with _running_nudger(0.2) as (client, nudger, _):
        nudger.reached_of = lambda workflow_id: reached.get(workflow_id)
        nudger.request("a", {"Pod": 1}, status_only=True)
        nudger.request("b", {"Pod": 2})
        await asyncio.sleep(0.05)
        reached["a"] = {"p-0-x": "uid-x"}
        await asyncio.sleep(0.3)
    assert [(wid, r) for (_, wid, _), r in zip(client.sent, client.reached, strict=True)] == [
        ("b", None), ("a", {"p-0-x": "uid-x"})]


async def test_each_replica_s_status_only_nudge_waits_its_own_window() -> None:
    """The window runs from a replica's first held change: another replica's window ending does not cut it short."""
    async with _running_nudger(0.4) as (client, nudger, began):
        nudger.request("a", {"Pod": 1}, status_only=True)
        await asyncio.sleep(0.25)
        nudger.request("b", {"Pod": 2}, status_only=True)
        nudger.request("a", {"Pod": 3}, status_only=True)  # merged into a's: its window still ends at 0.4
        await asyncio.sleep(0.3)
        assert [(wid, versions) for _, wid, versions in client.sent] == [("a", {"Pod": 3})], \
            "a's went when its window ended, b's window (from 0.25 s) has not"
        await asyncio.sleep(0.2)
        assert [wid for _, wid, _ in client.sent] == ["a", "b"]
        assert 0.4 <= client.sent[0][0] - began < 0.5 and client.sent[1][0] - began >= 0.65
