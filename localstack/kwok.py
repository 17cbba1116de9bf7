"""KWOK: plays kubelet for fake nodes (the stages in kwok_stages.py say how)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localstack.kwok_stages import STAGES_YAML
from localstack.processes import ManagedProcess, ProcessRegistry
from localstack.readiness import LOOPBACK, free_port, http_status, wait_until

# KWOK manages exactly the nodes carrying this label; removing it is how a node "goes silent" (kubelet gone).
MANAGED_NODE_LABEL = "grove-temporal.io/kwok-node"
POD_CIDR = "10.244.0.0/16"
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class NodeShape:
    """Capacity of one fake node (Kubernetes quantities)."""

    cpu: str = "64"
    memory: str = "512Gi"
    pods: int = 110
    gpus: int = 8

    def capacity(self) -> dict[str, str]:
        resources = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": "1Ti",
        }
        if self.gpus:
            resources[GPU_RESOURCE] = str(self.gpus)
        return resources


class Kwok:
    def __init__(self, binary: Path, run_dir: Path, registry: ProcessRegistry) -> None:
        self.dir = run_dir / "kwok"
        self.kubeconfig = run_dir / "kubeconfigs" / "kwok.kubeconfig"
        self.stages = self.dir / "stages.yaml"
        self.port = free_port()
        argv = [
            str(binary),
            f"--kubeconfig={self.kubeconfig}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-label-selector={MANAGED_NODE_LABEL}=true",
            f"--config={self.stages}",
            f"--server-address={LOOPBACK}:{self.port}",
            f"--cidr={POD_CIDR}",
            # The node Lease is the heartbeat kube-controller-manager watches (kubelet's default: 40 s). The kwok
            # binary leaves leases off unless told; the nodes would then go Unknown every ~50 s (node monitor grace)
            # and the node lifecycle controller would mark all their pods NotReady.
            "--node-lease-duration-seconds=40",
        ]
        # HOME inside the run dir: kwok would otherwise also load ~/.kwok/kwok.yaml and merge its stages with ours.
        self.process = ManagedProcess(
            "kwok", argv, run_dir / "logs" / "kwok.log", registry, env={"HOME": str(self.dir)}
        )

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.stages.write_text(STAGES_YAML)
        self.process.start()

    def healthy(self) -> bool:
        return http_status(f"http://{LOOPBACK}:{self.port}/healthz") == 200

    def wait_ready(self, timeout: float = 30.0) -> float:
        return wait_until(self.healthy, "kwok /healthz", timeout, self.process)
