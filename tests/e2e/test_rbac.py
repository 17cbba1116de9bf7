"""deploy/'s RBAC for real: a worker authenticated with a TokenRequest token of deploy/'s ServiceAccount (not admin)
runs S1–S3, is never refused, uses every rule it is granted, and is refused (403) everything else it was not
granted — Secrets first — through the same Kube client the worker uses."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client

from activities.kubeapi import (
    HPAS,
    LEASES,
    PODCLIQUES,
    PODCLIQUESETS,
    PODGANGS,
    PODS,
    SCALINGGROUPS,
    SERVICES,
    Kube,
    KubeError,
    Resource,
    api_client,
)
from tests import deploykit
from tests.e2e import scenarios
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, pcs_manifest, wait_for
from workflows.messages import ControlResult, ForceTerminateRequest, Phase

SA_USER = f"system:serviceaccount:{deploykit.NAMESPACE}:{deploykit.SERVICE_ACCOUNT}"
# Granted to every authenticated user by the bootstrap role system:basic-user: not part of deploy/.
SELF_REVIEWS = {"selfsubjectreviews", "selfsubjectaccessreviews", "selfsubjectrulesreviews"}
# Rules that authorise without a request of their own (see deploy/clusterrole.yaml).
AUTHORISATION_ONLY = {(r, "update") for r in ("podcliquesets/finalizers", "podcliquescalinggroups/finalizers",
                                             "podcliques/finalizers", "podgangs/finalizers")}

# Granted for a fallback the tour need not take: the status mirror GETs a PodClique or PCSG only where the watch cache
# does not hold it (not synced yet, or not heard of yet); otherwise it reads the cache (activities/status.mirror).
CACHE_FALLBACK_ONLY = {("podcliques", "get"), ("podcliquescalinggroups", "get")}

Rule = tuple[str, str]  # (resource[/subresource], verb)


def granted(namespace_scoped: bool = True) -> set[Rule]:
    """(resource, verb) pairs deploy/ grants: the ClusterRole, plus the lease Role in the worker's namespace."""
    files = ["clusterrole.yaml", "role.yaml"] if namespace_scoped else ["clusterrole.yaml"]
    rules: set[Rule] = set()
    for name in files:
        for doc in yaml.safe_load_all((deploykit.DEPLOY / name).read_text()):
            for rule in (doc or {}).get("rules") or []:
                rules |= {(res, verb) for res in rule["resources"] for verb in rule["verbs"]}
    return rules


def kube_requests(worker: WorkerProcess) -> dict[tuple[str, str, str], float]:
    """(verb, resource, code) -> count, from the worker's own request counter on /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.http_port}/metrics", timeout=5) as response:
        text = response.read().decode()
    counts: dict[tuple[str, str, str], float] = {}
    for family in text_string_to_metric_families(text):
        if family.name == "grove_temporal_kube_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    labels = sample.labels
                    counts[(labels["verb"], labels["resource"], labels["code"])] = sample.value
    return counts


def assert_never_refused(worker: WorkerProcess) -> dict[tuple[str, str, str], float]:
    counts = kube_requests(worker)
    assert counts, "the worker made Kubernetes requests"
    refused = {k: v for k, v in counts.items() if k[2] in ("401", "403")}
    assert not refused, f"requests refused under deploy/'s RBAC: {refused}"
    assert "forbidden" not in worker.logs().lower()
    return counts


# --- who the worker is ---------------------------------------------------------------------------------------------
def test_the_worker_kubeconfig_is_the_service_account_not_admin(stack: Any, service_account_kubeconfig: Path) -> None:
    review = json.loads(deploykit.kubectl(service_account_kubeconfig, "auth", "whoami", "-o", "json").stdout)
    user = review["status"]["userInfo"]
    assert user["username"] == SA_USER
    assert "system:masters" not in user["groups"]


def _rules_review(kube: Kube, namespace: str) -> set[Rule]:
    review = kube.create(Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
                                  namespaced=False), None,
                         {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectRulesReview",
                          "spec": {"namespace": namespace}})
    status = review["status"]
    assert not status.get("incomplete"), status
    rules = set()
    for rule in status["resourceRules"]:
        assert not rule.get("resourceNames"), rule
        rules |= {(res, verb) for res in rule["resources"] for verb in rule["verbs"] if res not in SELF_REVIEWS}
    return rules


def test_the_apiserver_grants_the_service_account_exactly_deploys_rules(
        service_account_kubeconfig: Path, namespace: str) -> None:
    """What the authoriser itself says the token may do: deploy/'s rules and nothing from any other binding."""
    kube = Kube(api_client(str(service_account_kubeconfig)))
    assert _rules_review(kube, namespace) == granted(namespace_scoped=False)
    assert _rules_review(kube, deploykit.NAMESPACE) == granted()


# --- S1–S3 as the ServiceAccount -----------------------------------------------------------------------------------
async def test_base_gang_release_as_the_service_account(cluster: Cluster, sa_worker_process: WorkerProcess,
                                         temporal_client: Client) -> None:
    await scenarios.s1_standalone_cliques_form_the_base_gang(cluster, temporal_client)
    assert_never_refused(sa_worker_process)


async def test_scaled_gang_release_as_the_service_account(cluster: Cluster, sa_worker_process: WorkerProcess) -> None:
    scenarios.s2_scaled_gangs_wait_for_the_base_gang(cluster)
    assert_never_refused(sa_worker_process)


async def test_scaled_gangs_stay_gated_as_the_service_account(cluster: Cluster, sa_worker_process: WorkerProcess) -> None:
    scenarios.s2_scaled_pods_stay_gated_while_the_base_gang_cannot_be_scheduled(cluster)
    assert_never_refused(sa_worker_process)


async def test_gang_termination_as_the_service_account(cluster: Cluster, sa_worker_process: WorkerProcess,
                                         temporal_client: Client) -> None:
    await scenarios.s3_standalone_breach_terminates_and_recreates_the_replica(cluster, temporal_client)
    assert_never_refused(sa_worker_process)


# --- nothing more than needed ----------------------------------------------------------------------------------------
async def test_the_worker_uses_every_rule_it_is_granted(cluster: Cluster, sa_worker_process: WorkerProcess,
                                                        temporal_client: Client) -> None:
    """A tour through every kind of change (PodClique and PCSG spec changes, HPAs created, changed and deleted, a
    breach termination, a forced one, scale-in): each granted (resource, verb) is used at least once, none is
    refused, none used is missing."""

    def manifest(frontend_min: int, sg_delay: str | None, max_replicas: int) -> dict:
        group = {"name": "sg", "replicas": 2, "minAvailable": 1, "cliqueNames": ["leader"],
                 "scaleConfig": {"maxReplicas": max_replicas}}
        if sg_delay:
            group["terminationDelay"] = sg_delay
        return pcs_manifest("tour", cluster.namespace, replicas=2, termination_delay="3s",
                            cliques=[clique("frontend", 2, frontend_min), clique("leader", 1, 1)],
                            scaling_groups=[group])

    cluster.apply(manifest(1, None, 3))
    wait_for(lambda: cluster.ready_pods(8), timeout=60, what="8 Ready pods")
    replica = Replica(temporal_client, cluster, "tour", 0)
    await replica.wait_phase(Phase.AVAILABLE)

    # PodClique spec (minAvailable), PCSG spec (terminationDelay) and HPA (maxReplicas) patched from the template
    cluster.patch_pcs("tour", {"spec": {"template": manifest(2, "3s", 4)["spec"]["template"]}})
    wait_for(lambda: ((cluster.pclq("tour-1-frontend") or {})["spec"].get("minAvailable") == 2
                      and (cluster.kube.get(SCALINGGROUPS, cluster.namespace, "tour-1-sg") or {})["spec"].get(
                          "terminationDelay") == "3s"
                      and (cluster.kube.get(HPAS, cluster.namespace, "tour-1-sg") or {})["spec"].get(
                          "maxReplicas") == 4), timeout=60, what="PodClique, PCSG and HPA specs changed")
    # A PodClique scaled out and back through its scale subresource (kubectl scale, an HPA): pods created, deleted.
    for count in (3, 2):
        cluster.kube.patch(PODCLIQUES, cluster.namespace, "tour-1-frontend", {"spec": {"replicas": count}},
                           subresource="scale")
        wait_for(lambda n=count: len(cluster.pods_of("tour-1-frontend")) == n and cluster.ready_pods(6 + n),
                 timeout=60, what=f"tour-1-frontend at {count} pods")
    before = cluster.live_pclq_uids()["tour-0-frontend"]
    cluster.fail_readiness("tour-0-frontend-0")  # 1 of minAvailable 2 Ready: PCS-replica termination after 3 s
    wait_for(lambda: cluster.live_pclq_uids().get("tour-0-frontend") not in (None, before), timeout=30,
             what="replica 0 terminated and recreated")
    wait_for(lambda: cluster.ready_pods(8), timeout=60, what="replica 0 Ready again")
    await replica.wait_phase(Phase.AVAILABLE)
    forced = await replica.handle.execute_update("force_terminate", ForceTerminateRequest(reason="rbac tour"),
                                                 result_type=ControlResult)
    assert forced.accepted, forced
    cluster.patch_pcs("tour", {"spec": {"replicas": 1}})  # scale-in: replica 1's objects are deleted
    selector = "grove.io/podcliqueset-replica-index=1"
    wait_for(lambda: not any(cluster.kube.list_items(r, cluster.namespace, label_selector=selector)
                             for r in (PODCLIQUES, SCALINGGROUPS, PODGANGS, SERVICES, PODS, HPAS)),
             timeout=60, what="replica 1 scaled in (its HPA too)")
    wait_for(lambda: cluster.ready_pods(4), timeout=60, what="replica 0 Ready after the forced termination")

    # The watcher's leader renews its Lease every 10 s; a quick tour may end before the first renewal.
    wait_for(lambda: ("update", "leases", "200") in kube_requests(sa_worker_process), timeout=30,
             what="a Lease renewal")
    # Not rules of deploy/: the apiserver's /readyz and the scheduler-backend discovery of
    # /apis/scheduling.k8s.io/v1alpha2 (both open to every client: system:public-info-viewer, system:discovery).
    used = ({(resource, verb) for verb, resource, _ in assert_never_refused(sa_worker_process)}
            - {("readyz", "list"), ("v1alpha2", "list")})
    assert used <= granted(), f"used but not granted: {used - granted()}"
    unused = granted() - used - CACHE_FALLBACK_ONLY
    assert unused == AUTHORISATION_ONLY, f"granted but never used: {unused - AUTHORISATION_ONLY}"


# --- refused ---------------------------------------------------------------------------------------------------------
SECRETS = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
CLUSTER_ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding",
                                 namespaced=False)


def test_out_of_scope_requests_are_refused(cluster: Cluster, service_account_kubeconfig: Path) -> None:
    ns = cluster.namespace
    admin = cluster.kube
    admin.create(SECRETS, ns, {"metadata": {"name": "db-password"}, "stringData": {"password": "hunter2"}})
    pcs = cluster.apply(pcs_manifest("web", ns, cliques=[clique("frontend", 1, 1)]))
    pod = admin.create(PODS, ns, {"metadata": {"name": "bystander"},
                                  "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}})
    kube = Kube(api_client(str(service_account_kubeconfig)))  # the worker's client, the worker's credentials

    # Control: the same client is allowed what deploy/ grants, so the refusals below are RBAC's, not a broken client.
    assert kube.list_items(PODS, ns) and kube.get(PODCLIQUESETS, ns, "web") is not None

    refused: dict[str, Callable[[], object]] = {
        "list Secrets in a workload namespace": lambda: kube.list(SECRETS, ns),
        "get a Secret": lambda: kube.get(SECRETS, ns, "db-password"),
        "list Secrets cluster-wide": lambda: kube.list(SECRETS),
        "get the worker's own Temporal Secret": lambda: kube.get(SECRETS, deploykit.NAMESPACE,
                                                                 "grove-temporal-temporal"),
        "create a Secret": lambda: kube.create(SECRETS, ns, {"metadata": {"name": "x"}}),
        "list ConfigMaps": lambda: kube.list(CONFIGMAPS, deploykit.NAMESPACE),
        "list Nodes": lambda: kube.list(NODES),
        "delete a Namespace": lambda: kube.delete(NAMESPACES, None, ns),
        "list Deployments": lambda: kube.list(DEPLOYMENTS, deploykit.NAMESPACE),
        "bind itself cluster-admin": lambda: kube.create(CLUSTER_ROLE_BINDINGS, None, {
            "metadata": {"name": "escalate"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                          "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": deploykit.SERVICE_ACCOUNT,
                          "namespace": deploykit.NAMESPACE}]}),
        "create a PodCliqueSet": lambda: kube.create(PODCLIQUESETS, ns, pcs_manifest("x", ns, cliques=[])),
        "patch a PodCliqueSet's spec": lambda: kube.patch(PODCLIQUESETS, ns, "web", {"spec": {"replicas": 9}}),
        "delete a PodCliqueSet": lambda: kube.delete(PODCLIQUESETS, ns, "web", uid=pcs["metadata"]["uid"]),
        "replace (update) a Pod": lambda: kube.replace(PODS, ns, "bystander", pod),
        "patch a Pod's status": lambda: kube.patch(PODS, ns, "bystander", {"status": {"phase": "Failed"}},
                                                   subresource="status"),
        "get a PodGang by name": lambda: kube.get(PODGANGS, ns, "web-0"),
        "watch Services": lambda: next(iter(kube.watch(SERVICES, ns, resource_version="0", timeout_seconds=1))),
        "create a Lease outside its namespace": lambda: kube.create(LEASES, ns, {"metadata": {"name": "l"},
                                                                                 "spec": {}}),
        "read kube-system's Leases": lambda: kube.get(LEASES, "kube-system", "kube-scheduler"),
    }
    allowed = []
    for what, call in refused.items():
        try:
            call()
            allowed.append(what)
        except KubeError as exc:
            assert exc.status == 403, f"{what}: expected 403, got {exc}"
    assert not allowed, f"deploy/'s ServiceAccount may: {allowed}"
    assert admin.get(SECRETS, ns, "db-password") is not None
    assert cluster.pcs("web")["spec"]["replicas"] == 1  # type: ignore[index]

