"""terminate_gang decides a breach again on a read of its own when the workflow's read is old or the attempt is a
retry: an attempt retried after a kube-apiserver outage used to delete on a read from before it, while the pods had
recovered meanwhile (their kubelets report once kube-apiserver is back). Against the real apiserver, with KWOK
playing the kubelets: the objects are created here, no worker runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from activities.kubeapi import EVENTS, PODCLIQUES, PODS, Kube, pod_ready
from grove import manifests, names
from grove.evaluate import ReplicaMemory
from grove.plan import topology_for
from grove.termination import Scope
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from tests.activities.objects import CountingKube, attempt, create_pcs, live
from tests.e2e.harness import wait_for
from workflows.messages import BreachRecheck, ReplicaRef, TerminateRequest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack

DELAY = timedelta(seconds=1)


def _pcs(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "template": {"terminationDelay": "1s", "cliques": [{"name": "w", "spec": {
                "roleName": "w", "replicas": 2, "minAvailable": 2, "podSpec": {
                    "containers": [{"name": "w", "image": "registry.k8s.io/pause:3.10"}]}}}]}}}


class Replica:
    """PodClique <name>-0-w of two pods (minAvailable 2) bound to a KWOK node, and what a termination request
    needs."""

    def __init__(self, client: Kube, namespace: str, name: str = "tr") -> None:
        self.client, self.namespace = client, namespace
        model, plan, pcs_obj, owner = create_pcs(client, namespace, _pcs(namespace, name))
        self.topology = topology_for(model, 0)
        self.ref = ReplicaRef(namespace=namespace, pcs=name, pcs_uid=pcs_obj["metadata"]["uid"], replica=0)
        self.pclq = f"{name}-0-w"
        pclq = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, self.pclq, owner=owner))
        self.uid = pclq["metadata"]["uid"]
        pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, self.pclq, self.uid)
        for index in range(2):
            body = manifests.pod_manifest(model, plan, self.pclq, index, owner=pod_owner)
            body["spec"].pop("schedulingGates", None)
            body["spec"]["nodeName"] = "kwok-node-0"  # the stack's first KWOK node: KWOK reports it Ready
            client.create(PODS, namespace, body)
        self.ready(2)

    def ready(self, count: int) -> None:
        def ready_now() -> bool:
            pods = self.client.list_items(PODS, self.namespace)
            return sum(1 for pod in pods if pod_ready(pod) and pod["metadata"]["name"].startswith(self.pclq)) == count
        wait_for(ready_now, timeout=30, what=f"{count} Ready pods of {self.pclq}")

    def fail_readiness(self) -> None:
        self.client.patch(PODS, self.namespace, f"{self.pclq}-1",
                          {"metadata": {"annotations": {FAKE_READINESS_ANNOTATION: FAKE_READINESS_FAIL}}})
        self.ready(1)

    def request(self, decided_ago: timedelta) -> TerminateRequest:
        """The termination the workflow decided on a read `decided_ago`: tr-0-w short since a while, due now."""
        now = datetime.now(UTC)
        start = now - decided_ago - DELAY
        memory = ReplicaMemory(was_available={self.pclq: self.uid}, clique_breach_starts={self.pclq: start})
        return TerminateRequest(
            ref=self.ref, scope=Scope.PCS_REPLICA, cliques={self.pclq: self.uid}, pod_gangs=(f"{self.ref.pcs}-0",),
            reason=f"PodClique {self.pclq} short of minAvailable", breach_start=start, delay=DELAY, deadline=start + DELAY,
            recheck=BreachRecheck(topology=self.topology, memory=memory, read_at=now - decided_ago))

    def pclq_live(self) -> bool:
        return live(self.client, PODCLIQUES, self.namespace, self.pclq)



def test_an_old_decision_whose_breach_has_healed_deletes_nothing_and_says_why(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.replica import ReplicaActivities

    client = Kube(kube)
    replica = Replica(client, namespace)  # both pods Ready: the breach the request was decided on has healed
    activities = ReplicaActivities(client)

    result = activities.terminate_gang(replica.request(decided_ago=timedelta(seconds=20)))
    assert result.deleted == () and "tr-0-w 2/2 Ready" in result.healed, result
    assert replica.pclq_live()
    skipped = [e["message"] for e in client.list_items(EVENTS, namespace) if e.get("reason") == "TerminationSkipped"]
    assert len(skipped) == 1 and "not carried out" in skipped[0] and "tr-0-w 2/2 Ready" in skipped[0], skipped

    # A retried attempt reads again however recent the decision's read: the outage may have been short.
    result = attempt(2).run(activities.terminate_gang, replica.request(decided_ago=timedelta(0)))
    assert result.deleted == () and "attempt 2" in result.healed, result
    assert replica.pclq_live()


def test_an_old_decision_whose_breach_holds_is_carried_out_and_a_recent_one_is_not_read_again(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.replica import ReplicaActivities

    client = CountingKube(kube)
    recent, old = Replica(client, namespace, "recent"), Replica(client, namespace, "old")
    activities = ReplicaActivities(client)
    for replica in (recent, old):
        replica.fail_readiness()  # KWOK reports it NotReady: the breach is real

    client.seen.clear()
    result = attempt(1).run(activities.terminate_gang, recent.request(decided_ago=timedelta(0)))
    assert result.deleted == ("recent-0-w",) and not result.healed, result
    assert client.requests("GET", "pods") == 0, "a first attempt on a read just made reads no pods again"
    wait_for(lambda: not recent.pclq_live(), timeout=10, what="recent-0-w deleting")

    client.seen.clear()
    result = activities.terminate_gang(old.request(decided_ago=timedelta(seconds=20)))
    assert result.deleted == ("old-0-w",) and not result.healed, result
    assert client.requests("GET", "pods") == 1, "an old decision is read again, once"
    wait_for(lambda: not old.pclq_live(), timeout=10, what="old-0-w deleting")
