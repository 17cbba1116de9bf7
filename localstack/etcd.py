"""etcd: the control plane's store, one member on loopback."""

from __future__ import annotations

from pathlib import Path

from localstack.processes import ManagedProcess, ProcessRegistry
from localstack.readiness import LOOPBACK, free_port, http_status, wait_until


class Etcd:
    def __init__(self, binary: Path, run_dir: Path, registry: ProcessRegistry) -> None:
        self.dir = run_dir / "etcd"
        # Ports are chosen once so a restart comes back where kube-apiserver expects it.
        self.client_port = free_port()
        self.peer_port = free_port()
        self.client_url = f"http://{LOOPBACK}:{self.client_port}"
        peer_url = f"http://{LOOPBACK}:{self.peer_port}"
        argv = [
            str(binary),
            "--name=grove-temporal",
            f"--data-dir={self.dir / 'data'}",
            f"--listen-client-urls={self.client_url}",
            f"--advertise-client-urls={self.client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=grove-temporal={peer_url}",
            # A throw-away store: skipping fsync makes every Kubernetes write noticeably cheaper.
            "--unsafe-no-fsync",
            "--log-level=warn",
        ]
        self.process = ManagedProcess("etcd", argv, run_dir / "logs" / "etcd.log", registry)

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process.start()

    def wait_ready(self, timeout: float = 30.0) -> float:
        return wait_until(
            lambda: http_status(f"{self.client_url}/health") == 200,
            "etcd",
            timeout,
            self.process,
            interval=0.05,
        )
