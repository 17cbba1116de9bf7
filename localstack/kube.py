"""kube-apiserver, kube-scheduler and kube-controller-manager as local processes.

Identities are static tokens (`--token-auth-file`): an admin in system:masters for people and tests, and the
well-known user `system:kube-scheduler`, which the apiserver's bootstrap RBAC policy grants exactly what the scheduler
needs, so RBAC is exercised as in a real cluster. kube-controller-manager runs all its
controllers with its own identity (`--use-service-account-credentials=false`, in system:masters): with per-controller
service accounts each controller first waits for its own token, which added ~3 s to every stack start.
"""

from __future__ import annotations

from pathlib import Path

from localstack.etcd import Etcd
from localstack.kubeconfig import KubeUser, write_kubeconfig
from localstack.pki import FRONT_PROXY_CLIENT, ControlPlanePki
from localstack.processes import ManagedProcess, ProcessRegistry
from localstack.readiness import LOOPBACK, free_port, http_status, wait_until

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

ADMIN = "grove-temporal-admin"
SCHEDULER = "system:kube-scheduler"
CONTROLLER_MANAGER = "system:kube-controller-manager"
KWOK = "kwok-controller"

# Kubernetes' own gang scheduling (KEP-4671, alpha in v1.36): the PodGroup API and the pod field
# spec.schedulingGroup need GenericWorkload in kube-apiserver (and the API group switched on); kube-scheduler needs
# it too, plus GangScheduling; kube-controller-manager runs PodGroupProtection with it (without that controller
# the finalizer the apiserver puts on every PodGroup is never removed).
GANG_API = "--runtime-config=scheduling.k8s.io/v1alpha2=true"
APISERVER_GATES = "--feature-gates=GenericWorkload=true"
# SchedulerPopFromBackoffQ (KEP-5142, on by default in v1.36) lets an idle scheduler pop pods from the backoff queue
# before their backoff has run out. With GangScheduling a gang that cannot fit is rejected as a whole into that queue,
# so one unschedulable gang was retried thousands of times a second and kept half a core busy for as long as it
# stayed unschedulable (tests/localstack/test_native_gang_scheduling.py). Off, its pods wait out their 1-10 s backoff
# or a cluster change that may help them.
SCHEDULER_GATES = "--feature-gates=GenericWorkload=true,GangScheduling=true,SchedulerPopFromBackoffQ=false"
CONTROLLER_MANAGER_GATES = "--feature-gates=GenericWorkload=true"


class ApiServer:
    def __init__(
        self,
        binary: Path,
        run_dir: Path,
        registry: ProcessRegistry,
        etcd: Etcd,
        pki: ControlPlanePki,
        token_file: Path,
        admin: KubeUser,
        gang_scheduling: bool = True,
    ) -> None:
        self.dir = run_dir / "kube-apiserver"
        self.port = free_port()
        self.url = f"https://{LOOPBACK}:{self.port}"
        self.pki = pki
        self.admin = admin
        argv = [
            str(binary),
            f"--etcd-servers={etcd.client_url}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            # The `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints validation rejects (the
            # reconciler would log an error every 10 s); nothing runs in a pod network here that could use them.
            "--endpoint-reconciler-type=none",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir / 'certs'}",
            f"--tls-cert-file={pki.apiserver_cert}",
            f"--tls-private-key-file={pki.apiserver_key}",
            f"--client-ca-file={pki.ca_cert}",
            # Request-header (front-proxy) authentication, as kubeadm configures it; the scheduler and
            # controller-manager read this CA from the extension-apiserver-authentication ConfigMap.
            f"--requestheader-client-ca-file={pki.ca_cert}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki.front_proxy_client_cert}",
            f"--proxy-client-key-file={pki.front_proxy_client_key}",
            f"--token-auth-file={token_file}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki.service_account_pub}",
            f"--service-account-signing-key-file={pki.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--allow-privileged=true",
            "--profiling=false",
            *([APISERVER_GATES, GANG_API] if gang_scheduling else []),
        ]
        # After SIGTERM it stops serving at once but lingers (seen: >10 s) on requests it will never finish; its
        # data lives in etcd, so killing it after a short grace loses nothing and keeps fault tests quick.
        self.process = ManagedProcess(
            "kube-apiserver", argv, run_dir / "logs" / "kube-apiserver.log", registry, max_grace=3.0
        )

    def start(self) -> None:
        (self.dir / "certs").mkdir(parents=True, exist_ok=True)
        self.process.start()

    def ready(self) -> bool:
        return http_status(f"{self.url}/readyz", self.pki.ca_cert, self.admin.token) == 200

    def wait_ready(self, timeout: float = 60.0) -> float:
        return wait_until(self.ready, "kube-apiserver /readyz", timeout, self.process)


class _ControlPlaneComponent:
    """kube-scheduler and kube-controller-manager: same serving/auth flags, own kubeconfig, /healthz."""

    name = ""

    def __init__(self, binary: Path, run_dir: Path, registry: ProcessRegistry, extra_args: list[str]) -> None:
        self.dir = run_dir / self.name
        self.kubeconfig = run_dir / "kubeconfigs" / f"{self.name}.kubeconfig"
        self.port = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig}",
            # Delegated authn/authz of its own /metrics etc., as kubeadm sets it up; /healthz stays open.
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={self.port}",
            f"--cert-dir={self.dir / 'certs'}",
            "--leader-elect=false",
            *extra_args,
        ]
        self.process = ManagedProcess(self.name, argv, run_dir / "logs" / f"{self.name}.log", registry)

    def write_kubeconfig(self, server: str, ca_file: Path, user: KubeUser) -> None:
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(self.kubeconfig, server, ca_file, user)

    def start(self) -> None:
        (self.dir / "certs").mkdir(parents=True, exist_ok=True)
        self.process.start()

    def healthy(self) -> bool:
        return http_status(f"https://{LOOPBACK}:{self.port}/healthz") == 200

    def wait_ready(self, timeout: float = 60.0) -> float:
        return wait_until(self.healthy, f"{self.name} /healthz", timeout, self.process)


class Scheduler(_ControlPlaneComponent):
    name = "kube-scheduler"

    def __init__(self, binary: Path, run_dir: Path, registry: ProcessRegistry, gang_scheduling: bool = True) -> None:
        super().__init__(binary, run_dir, registry, [SCHEDULER_GATES] if gang_scheduling else [])


class ControllerManager(_ControlPlaneComponent):
    name = "kube-controller-manager"

    def __init__(self, binary: Path, run_dir: Path, registry: ProcessRegistry, pki: ControlPlanePki,
                 gang_scheduling: bool = True) -> None:
        super().__init__(
            binary,
            run_dir,
            registry,
            [
                "--use-service-account-credentials=false",  # see the module docstring
                # The token controller signs legacy ServiceAccount tokens with the key kube-apiserver verifies,
                # and publishes the root CA as kube-root-ca.crt in every namespace.
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                f"--cluster-signing-cert-file={pki.ca_cert}",
                f"--cluster-signing-key-file={pki.ca_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--cluster-name=grove-temporal",
                *([CONTROLLER_MANAGER_GATES] if gang_scheduling else []),
            ],
        )
