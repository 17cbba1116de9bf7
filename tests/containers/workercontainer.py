"""The worker image run the way deploy/deployment.yaml runs it (non-root, read-only root filesystem, /tmp as the
only writable path, no capabilities), through testcontainers, on the host's network so it reaches the local
stack's loopback-only apiserver and Temporal. testcontainers' HTTP wait strategy needs a mapped port, which host
networking has none of, so /readyz is polled here."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from testcontainers.core.container import DockerContainer

from localstack.readiness import free_port
from tests.containers.conftest import DOCKER_CLIENT

KUBECONFIG_IN_CONTAINER = "/etc/grove-temporal/kubeconfig"


def worker_container(image: str, *, kubeconfig: Path, temporal_address: str, namespace: str | None,
                     task_queue: str, extra_env: dict[str, str] | None = None) -> tuple[DockerContainer, int]:
    """A configured (not started) worker container and the host port of its HTTP endpoint."""
    port = free_port()
    args = ["--kubeconfig", KUBECONFIG_IN_CONTAINER, "--temporal-address", temporal_address,
            "--task-queue", task_queue, "--http-port", str(port), "--log-level", "INFO"]
    if namespace:
        args += ["--namespace", namespace]
    container = (
        DockerContainer(image, docker_client_kw=DOCKER_CLIENT)
        .with_command(args)
        .with_volume_mapping(str(kubeconfig), KUBECONFIG_IN_CONTAINER, "ro")
        .with_tmpfs_mount("/tmp", "size=64m")
        .with_kwargs(network_mode="host", read_only=True, cap_drop=["ALL"],
                     security_opt=["no-new-privileges:true"], stop_signal="SIGTERM")
    )
    for key, value in (extra_env or {}).items():
        container.with_env(key, value)
    return container, port


def http_get(port: int, path: str, timeout: float = 3) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError as error:
        return 0, str(error)


def wait_ready(container: DockerContainer, port: int, timeout: float = 120) -> float:
    """Seconds until /readyz answered 200; fails with the container's log if it exits or never gets there."""
    started = time.monotonic()
    last: tuple[int, str] = (0, "")
    while time.monotonic() - started < timeout:
        container.reload()
        if container.status == "exited":
            raise AssertionError(f"worker container exited:\n{logs(container)[-4000:]}")
        last = http_get(port, "/readyz")
        if last[0] == 200:
            return time.monotonic() - started
        time.sleep(0.5)
    raise AssertionError(f"/readyz not 200 within {timeout:.0f}s (last {last}):\n{logs(container)[-4000:]}")


def logs(container: DockerContainer) -> str:
    out, err = container.get_logs()
    return (out + err).decode(errors="replace")
