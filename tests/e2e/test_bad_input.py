"""Bad input changes nothing: the corpus applied to the real apiserver and worker, and malformed or mistargeted
controls sent to a running replica. Objects and workflow state are compared before and after."""

from __future__ import annotations

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client, WorkflowUpdateFailedError

from activities.kubeapi import JSON, PODCLIQUES, PODGANGS, PODS, SCALINGGROUPS, KubeError
from tests.corpus.admission import rules_suspended
from tests.corpus.bad_manifests import CASES
from tests.e2e.harness import Cluster, Replica, WorkerProcess, await_for, clique, pcs_manifest, wait_for
from workflows.messages import ForceTerminateRequest, Phase, ReplicaStatus


def _objects(cluster: Cluster) -> dict[str, tuple[str, str]]:
    """Every object we could have created in the namespace: name -> (uid, resourceVersion)."""
    found = {}
    for resource in (PODCLIQUES, SCALINGGROUPS, PODGANGS, PODS):
        for obj in cluster.kube.list_items(resource, cluster.namespace):
            meta = obj["metadata"]
            found[f"{resource.kind}/{meta['name']}"] = (meta["uid"], meta["resourceVersion"])
    return found


def _condition(cluster: Cluster, name: str) -> dict | None:
    obj = cluster.pcs(name) or {}
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "SpecValid"), None)


def test_corpus_is_refused_and_creates_nothing(cluster: Cluster, worker_process: WorkerProcess,
                                               kube: ApiClient) -> None:
    """Refused at the door (schema or admission rule; tests/deploy/test_admission.py checks the paths), or stored
    and refused by the workflow. The admission rules suspended, every rule case reaches the workflow too: objects
    stored before the rules existed get the same verdict, from the same rule source."""
    admitted = []
    for index, case in enumerate(CASES):
        manifest = case.manifest(f"bad-{index}")
        if not case.admitted:
            with pytest.raises(KubeError) as refused:
                cluster.apply(manifest)
            assert refused.value.status == 422, case.id
            continue
        cluster.apply(manifest)
        admitted.append((manifest["metadata"]["name"], case))
    with rules_suspended(kube, cluster.namespace):
        for index, case in enumerate(CASES):
            if case.refused_by == "rule":
                manifest = case.manifest(f"old-{index}")
                cluster.apply(manifest)
                admitted.append((manifest["metadata"]["name"], case))
    assert len(admitted) >= 30
    for name, case in admitted:
        condition = wait_for(lambda name=name: (c := _condition(cluster, name)) and c["status"] == "False" and c,
                             timeout=60, what=f"SpecValid=False on {name} ({case.id})")
        assert condition["reason"] == "Invalid" and case.field in condition["message"], (case.id, condition)
    # The Event follows the condition (written first, then recorded): wait for every one, not one listing.
    def every_event() -> dict[str, JSON] | None:
        events = {e["involvedObject"]["name"]: e for e in cluster.events("InvalidSpec")}
        return events if all(name in events for name, _ in admitted) else None

    invalid_events = wait_for(every_event, timeout=30, what="an InvalidSpec Event on every admitted PodCliqueSet")
    for name, case in admitted:
        assert name in invalid_events and case.field in invalid_events[name]["message"], case.id
        assert invalid_events[name]["type"] == "Warning"
    assert _objects(cluster) == {}, "nothing of an invalid PodCliqueSet is created"


async def test_bad_controls_change_nothing(cluster: Cluster, worker_process: WorkerProcess,
                                           temporal_client: Client) -> None:
    cluster.apply(pcs_manifest("ok", cluster.namespace, termination_delay="1h",
                               cliques=[clique("a", 1, 1)],
                               scaling_groups=None))
    wait_for(lambda: cluster.ready_pods(1), timeout=60, what="1 Ready pod")
    handle = temporal_client.get_workflow_handle(cluster.workflow_id("ok", 0))

    async def status() -> ReplicaStatus:
        result: ReplicaStatus = await handle.query("status", result_type=ReplicaStatus)
        return result

    await await_for(lambda: _available(status), timeout=20, what="Available")
    objects_before = _objects(cluster)
    before = await status()
    state_before, before_signals = before.model_dump(exclude={"observed_at", "rejected"}), before.signals

    # Updates: refused by the validator, with the field named; nothing recorded as accepted.
    for request, mentions in [
        (ForceTerminateRequest(reason="x", scaling_group="nosuch", scaling_group_replica=0), "nosuch"),
        (ForceTerminateRequest(reason="x", scaling_group_replica=2), "scaling_group"),
    ]:
        with pytest.raises(WorkflowUpdateFailedError) as failed:
            await handle.execute_update("force_terminate", request)
        assert mentions in str(failed.value.cause), failed.value.cause
    with pytest.raises(WorkflowUpdateFailedError):  # a payload of the wrong shape is refused before the handler
        await handle.execute_update("force_terminate", {"scaling_group": ["not", "a", "name"], "bogus": True})

    # Signals: fire-and-forget; the workflow drops or rejects them and keeps running.
    await handle.signal("force_terminate", ForceTerminateRequest(reason="x", scaling_group="nosuch",
                                                                 scaling_group_replica=0))
    await handle.signal("force_terminate", {"scaling_group": 7, "unexpected": "field"})
    await handle.signal("pause", 42)

    after = await await_for(lambda: _rejected(status), timeout=20, what="the signal's rejection recorded")
    assert any("nosuch" in r for r in after.rejected)
    # The per-run message counters (signal budget) and the history length the run counts take in refused messages
    # too (a refused signal is still an event in the history); everything else is unchanged.
    counters = {"observed_at", "rejected", "nudges", "signals", "updates", "nudges_total", "history_events_counted"}
    assert after.model_dump(exclude=counters) == {k: v for k, v in state_before.items() if k not in counters}
    assert after.signals > before_signals, "the refused signals were received (and counted)"
    assert after.history_events_counted > before.history_events_counted
    assert _objects(cluster) == objects_before
    assert (await handle.describe()).status.name == "RUNNING"


async def _available(status) -> bool:  # type: ignore[no-untyped-def]
    return (await status()).phase is Phase.AVAILABLE


async def _rejected(status):  # type: ignore[no-untyped-def]
    result = await status()
    return result if result.rejected else None


async def test_a_pcs_name_too_long_for_a_label_holds_its_replica_as_invalid(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    """The apiserver admits names up to 253 characters, but our labels carry the PCS name (63 at most): the
    replica workflow must hold the replica as Invalid, not fail every round on a refused label selector."""
    name = "p" * 70
    with rules_suspended(cluster.kube.api_client, cluster.namespace):  # refused at the door since the CEL rules
        cluster.apply(pcs_manifest(name, cluster.namespace, cliques=[clique("app", 1, 1)]))
    status = await Replica(temporal_client, cluster, name).wait_phase(Phase.INVALID)
    assert status.problems and all("metadata.name" in p for p in status.problems), status.problems
    assert _objects(cluster) == {}
