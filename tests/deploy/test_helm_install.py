"""`helm install` of deploy/helm/grove-temporal into the real local stack, namespace-scoped, and a PodCliqueSet driven
to Available by a worker that runs as the chart's ServiceAccount (a TokenRequest token, what the pod's projected
token is). The worker runs on the host, not from the Deployment: KWOK fakes pods (a Deployment's pod would be
reported Running without anything running), so the chart is installed with replicaCount=0. tests/containers/ runs
the image itself."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from kubernetes.client import ApiClient, AppsV1Api, RbacAuthorizationV1Api
from temporalio.client import Client

from localstack.stack import LocalStack
from localstack.workerproc import WorkerProcess
from tests import deploykit
from tests.deploy.test_helm_chart import CHART, deploy_doc, run_helm
from tests.e2e.harness import Cluster, Replica, clique, pcs_manifest
from workflows.messages import Phase

pytestmark = pytest.mark.stack
RELEASE = "gt-helm"
RELEASE_NAMESPACE = "gt-helm-system"
FULLNAME = f"{RELEASE}-grove-temporal"


@pytest.fixture
def cluster(kube: ApiClient, crds: list[str], namespace: str) -> Cluster:
    from activities.kubeapi import Kube

    return Cluster(Kube(kube), namespace)


async def test_helm_install_then_a_pcs_reaches_available_as_the_charts_service_account(
        helm: Path, stack: LocalStack, kube: ApiClient, cluster: Cluster, temporal_client: Client,
        tmp_path: Path) -> None:
    install = run_helm(helm, "install", RELEASE, str(CHART), "--kubeconfig", str(stack.kubeconfig),
                       "--namespace", RELEASE_NAMESPACE, "--create-namespace", "--wait", "--timeout", "120s",
                       "--set", "replicaCount=0", "--set", f"temporal.address={stack.temporal_address}",
                       "--set", f"watchNamespace={cluster.namespace}",
                       "--set", f"temporal.taskQueue=tq-{cluster.namespace}")
    worker: WorkerProcess | None = None
    try:
        assert install.returncode == 0, install.stdout + install.stderr
        assert "STATUS: deployed" in install.stdout
        # What the chart created, as the apiserver has it: the worker's rules in the watched namespace only.
        rbac = RbacAuthorizationV1Api(kube)
        role = rbac.read_namespaced_role(f"{FULLNAME}-worker", cluster.namespace)
        wanted = deploy_doc("clusterrole.yaml", "ClusterRole")["rules"]
        assert [(r.api_groups, r.resources, r.verbs) for r in role.rules] == [
            (r["apiGroups"], r["resources"], r["verbs"]) for r in wanted]
        assert AppsV1Api(kube).read_namespaced_deployment(FULLNAME, RELEASE_NAMESPACE).spec.replicas == 0

        token = deploykit.kubectl(stack.kubeconfig, "create", "token", FULLNAME, "-n", RELEASE_NAMESPACE,
                                  "--duration=3600s").stdout.strip()
        kubeconfig = deploykit.write_kubeconfig(tmp_path / "sa.kubeconfig",
                                                deploykit.cluster_access(stack.kubeconfig), token, user=FULLNAME)
        whoami = deploykit.kubectl(kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert whoami.stdout == f"system:serviceaccount:{RELEASE_NAMESPACE}:{FULLNAME}"
        # Namespace scope: nothing outside the watched namespace.
        denied = deploykit.kubectl(kubeconfig, "auth", "can-i", "list", "pods", "-n", "default", check=False)
        assert denied.stdout.strip() == "no"

        # As the Deployment's pod would run it: the ConfigMap's settings, the Lease in the release namespace.
        worker = WorkerProcess(kubeconfig=kubeconfig, temporal_address=stack.temporal_address,
                               namespace=cluster.namespace, log_dir=tmp_path,
                               extra_env={"GROVE_TEMPORAL_LEASE_NAMESPACE": RELEASE_NAMESPACE}).start()
        cluster.apply(pcs_manifest("charted", cluster.namespace, cliques=[clique("a", 2, 2)]))
        await Replica(temporal_client, cluster, "charted").wait_phase(Phase.AVAILABLE, timeout=90)
        # A refusal as a word: "403" also turns up inside UIDs in the log lines (a PCS uid 684f429f-...-4039-...),
        # and as the milliseconds of a line's timestamp ("13:30:34,403", CI on ed62c65): those are cut off first.
        logs = worker.logs()
        messages = "\n".join(re.sub(r"^\d{4}-\d\d-\d\d[ T][\d:.,]+Z?\s", "", line) for line in logs.splitlines())
        assert not re.search(r"\b403\b", messages) and "Forbidden" not in logs, logs[-3000:]
    finally:
        if worker is not None:
            worker.stop()
        uninstall = run_helm(helm, "uninstall", RELEASE, "--kubeconfig", str(stack.kubeconfig),
                             "--namespace", RELEASE_NAMESPACE, "--wait")
        subprocess.run([str(deploykit.kubectl_path()), "--kubeconfig", str(stack.kubeconfig), "delete",
                        "namespace", RELEASE_NAMESPACE, "--wait=false"], capture_output=True, timeout=60)
    assert uninstall.returncode == 0, uninstall.stderr
