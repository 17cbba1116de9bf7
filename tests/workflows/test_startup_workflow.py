"""The middle tier for startup order (DESIGN §4.10): the real ReplicaWorkflow on a real dev server, with scripted
activities. decode starts after prefill: its waiting pods are released (activity release_startup) only once every
prefill pod is Ready, once, and not while paused; the wait shows in the status query."""

from __future__ import annotations

from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client

from grove.models import PodCliqueSet
from tests.workflows.test_replica_workflow import ScriptedCluster, _run, _status, _until
from workflows import contract
from workflows.messages import (
    CliqueState,
    ControlResult,
    Nudge,
    PauseRequest,
    PcsState,
    ReplicaSnapshot,
    StartupRequest,
    StartupResult,
)


def _ordered(name: str) -> PodCliqueSet:
    def clique(clique_name: str, after: list[str]) -> dict:
        return {"name": clique_name, "spec": {"roleName": clique_name, "replicas": 2, "startsAfter": after,
                                              "podSpec": {"containers": [{"name": "c", "image": "i"}]}}}

    return PodCliqueSet.model_validate({
        "apiVersion": "grove.io/v1alpha1", "kind": "PodCliqueSet",
        "metadata": {"name": name, "namespace": "ns", "uid": "uid-1"},
        "spec": {"replicas": 1, "template": {"cliqueStartupType": "CliqueStartupTypeExplicit",
                                             "cliques": [clique("prefill", []), clique("decode", ["prefill"])]}},
    })


class OrderedCluster(ScriptedCluster):
    """prefill has `ready` Ready pods; decode's two pods wait until release_startup marks them."""

    def __init__(self, pcs: PodCliqueSet) -> None:
        super().__init__(pcs)
        self.ready = 0
        self.started: list[StartupRequest] = []
        self.decode = f"{pcs.name}-0-decode"

    def snapshot(self, ready: int | None = None) -> ReplicaSnapshot:  # the cache never lags here
        now = datetime.now(UTC)
        with self._lock:
            waiting = {} if self.started else {f"{self.decode}-{i}": f"uid-{i}" for i in range(2)}
            cliques = {
                f"{self.topology.pcs}-0-prefill": CliqueState(uid="p", pods=2, ready=self.ready, scheduled=2),
                self.decode: CliqueState(uid="d", pods=2, ready=0 if waiting else 2, scheduled=2,
                                         startup_waiting=waiting),
            }
        return ReplicaSnapshot(read_at=now, read_from=now, pcs_state=PcsState.PRESENT, wanted_replicas=1,
                               topology=self.topology, cliques=cliques)

    def activities(self) -> list[object]:
        @activity.defn(name=contract.RELEASE_STARTUP)
        def start(request: StartupRequest) -> StartupResult:
            with self._lock:
                self.started.append(request)
            return StartupResult(started=tuple(request.pods))

        return [*super().activities(), start]


async def test_decode_starts_once_every_prefill_pod_is_ready_and_not_while_paused(client: Client) -> None:  # noqa: F811
    cluster = OrderedCluster(_ordered("order"))
    assert {u.name: u.starts_after for u in cluster.topology.cliques}["order-0-decode"] == ("order-0-prefill",)
    worker, handle = await _run(client, cluster)
    async with worker:
        cluster.ready = 1
        await _until(handle, lambda s: s.startup == ("order-0-decode waits for order-0-prefill Ready (1/2)",))
        await handle.execute_update(contract.PAUSE, PauseRequest(reason="hold"), result_type=ControlResult)
        cluster.ready = 2
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: s.startup == ())  # nothing waits for prefill any more...
        assert cluster.started == [], "...but paused: nothing is started"
        await handle.execute_update(contract.RESUME, result_type=ControlResult)
        await _until(handle, lambda s: bool(cluster.started))
        (request,), = [cluster.started]
        assert request.pods == {"order-0-decode-0": "uid-0", "order-0-decode-1": "uid-1"}
        assert request.cliques == {"order-0-decode": ("order-0-prefill",)}
        await handle.signal(contract.NUDGE_SIGNAL, Nudge(sent_at=datetime.now(UTC)))
        await _until(handle, lambda s: s.phase.value == "Available")
        assert len(cluster.started) == 1, "started once"
        assert (await _status(handle)).startup == ()
