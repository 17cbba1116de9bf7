"""recreate_for_update decides a rolling update step again on a read of its own when the step's read is old or the
attempt is a retry: a Ready outdated pod goes only while its PodClique's unavailable pods stay within
maxUnavailable, and pods may have turned NotReady while kube-apiserver was down (their kubelets report once it is
back). Against the real apiserver, with KWOK playing the kubelets: the objects are created here, no worker runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from activities.kubeapi import PODCLIQUES, PODS, Kube, pod_ready
from grove import manifests, names
from grove.plan import topology_for
from grove.rollout import replica_step, rollout_spec
from localstack.kwok_stages import FAKE_READINESS_ANNOTATION, FAKE_READINESS_FAIL
from tests.activities.objects import CountingKube, attempt, create_pcs, live
from tests.e2e.harness import wait_for
from workflows.messages import RecreateRequest, ReplicaRef, StepRecheck
from workflows.presentation import rollout_progress

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from localstack.stack import LocalStack

OLD, NEW = "old-template", "new-template"


def _pcs(namespace: str, name: str) -> dict[str, Any]:
    return {"apiVersion": names.GROVE_API_VERSION, "kind": names.KIND_PODCLIQUESET,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "template": {"cliques": [{"name": "w", "spec": {
                "roleName": "w", "replicas": 3, "minAvailable": 2, "podSpec": {
                    "containers": [{"name": "w", "image": "registry.k8s.io/pause:3.10"}]}}}]}}}


class Outdated:
    """PodClique <name>-0-w of three Ready pods labelled with an older pod template (maxUnavailable 1)."""

    def __init__(self, client: Kube, namespace: str, name: str) -> None:
        self.client, self.namespace, self.pclq = client, namespace, f"{name}-0-w"
        model, plan, pcs_obj, owner = create_pcs(client, namespace, _pcs(namespace, name))
        self.topology = topology_for(model, 0)
        self.spec = rollout_spec(model, self.topology)
        self.ref = ReplicaRef(namespace=namespace, pcs=name, pcs_uid=pcs_obj["metadata"]["uid"], replica=0)
        pclq = client.create(PODCLIQUES, namespace, manifests.podclique_manifest(model, plan, self.pclq, owner=owner))
        pod_owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUE, self.pclq,
                                              pclq["metadata"]["uid"])
        self.uids: dict[str, str] = {}
        for index in range(3):
            body = manifests.pod_manifest(model, plan, self.pclq, index, owner=pod_owner)
            body["spec"].pop("schedulingGates", None)
            body["spec"]["nodeName"] = "kwok-node-0"  # the stack's first KWOK node: KWOK reports it Ready
            body["metadata"]["labels"][names.LABEL_POD_TEMPLATE_HASH] = OLD
            self.uids[body["metadata"]["name"]] = client.create(PODS, namespace, body)["metadata"]["uid"]
        self.ready(3)

    def ready(self, count: int) -> None:
        def ready_now() -> bool:
            pods = self.client.list_items(PODS, self.namespace)
            return sum(1 for p in pods if pod_ready(p) and p["metadata"]["name"].startswith(self.pclq)) == count
        wait_for(ready_now, timeout=30, what=f"{count} Ready pods of {self.pclq}")

    def step_request(self, decided_ago: timedelta) -> RecreateRequest:
        """The step the workflow took on its read `decided_ago`, all three pods Ready: the lowest index goes first."""
        from activities.observe import clique_states, read_pods

        states = clique_states(read_pods(self.client, self.ref), targets={self.pclq: NEW})
        step = replica_step(self.topology, rollout_progress(states), self.spec)
        assert step.delete_pods == {f"{self.pclq}-0": self.uids[f"{self.pclq}-0"]}, step
        return RecreateRequest(
            ref=self.ref, pods=step.delete_pods, cliques=step.delete_cliques, generation_hash=NEW,
            units=step.recreating, recheck=StepRecheck(topology=self.topology, spec=self.spec,
                                                       targets={self.pclq: NEW},
                                                       read_at=datetime.now(UTC) - decided_ago))

    def pod_live(self, pod: str) -> bool:
        return live(self.client, PODS, self.namespace, pod)



def test_a_retried_step_leaves_a_ready_pod_once_another_turned_not_ready(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.rollout import RolloutActivities

    client = Kube(kube)
    replica = Outdated(client, namespace, "rr")
    request = replica.step_request(decided_ago=timedelta(0))
    client.patch(PODS, namespace, "rr-0-w-2",  # meanwhile another pod turned NotReady: one unavailable already
                 {"metadata": {"annotations": {FAKE_READINESS_ANNOTATION: FAKE_READINESS_FAIL}}})
    replica.ready(2)

    result = attempt(2).run(RolloutActivities(client).recreate_for_update, request)
    assert result.deleted == () and result.deferred == ("Pod/rr-0-w-0",), result
    assert replica.pod_live("rr-0-w-0"), "maxUnavailable 1 is spent: the Ready pod stays"


def test_a_step_on_a_recent_read_is_not_read_again_and_an_old_one_that_still_holds_goes_ahead(
        stack: LocalStack, kube: ApiClient, crds: list[str], namespace: str) -> None:
    from activities.rollout import RolloutActivities

    client = CountingKube(kube)
    recent, old = Outdated(client, namespace, "recent"), Outdated(client, namespace, "old")
    activities = RolloutActivities(client)

    request = recent.step_request(decided_ago=timedelta(0))
    client.seen.clear()
    result = attempt(1).run(activities.recreate_for_update, request)
    assert result.deleted == ("Pod/recent-0-w-0",) and not result.deferred, result
    assert client.requests("GET", "pods") == 0, "a first attempt on a read just made reads no pods again"

    request = old.step_request(decided_ago=timedelta(seconds=20))
    client.seen.clear()
    result = activities.recreate_for_update(request)
    assert result.deleted == ("Pod/old-0-w-0",) and not result.deferred, result
    assert client.requests("GET", "pods") == 1, "an old step is decided again, on one read"
