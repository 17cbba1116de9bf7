"""The worker image (deploy/Dockerfile, built offline here) run against the real local stack: what it holds, who it
runs as, that it needs nothing writable but /tmp, that it gets ready, drives a PodCliqueSet to Available, and drains
in-flight activities on SIGTERM as the Deployment's 45 s grace period expects."""

from __future__ import annotations

import time
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from testcontainers.core.container import DockerContainer

from localstack.compose import readable_kubeconfig
from localstack.engine import Engine
from localstack.images import Built
from localstack.stack import LocalStack
from tests.containers.conftest import DOCKER_CLIENT
from tests.containers.workercontainer import logs, wait_ready, worker_container
from tests.e2e.harness import Cluster, Replica, clique, observe_held_in_flight, pcs_manifest, wait_for
from workflows.messages import Phase

MAX_IMAGE_MB = 300
HOLD_SECONDS = 3.0


def _run(image: str, script: str) -> tuple[int, str]:
    container = (DockerContainer(image, docker_client_kw=DOCKER_CLIENT)
                 .with_kwargs(entrypoint=["sh", "-c"], network_mode="host", read_only=True)
                 .with_command([script]))
    container.start()
    try:
        code = container.wait()
        return code, logs(container)
    finally:
        container.stop()


def test_image_holds_the_product_only_and_is_small(engine: Engine, worker_image: Built) -> None:
    took = f"built in {worker_image.seconds:.0f} s" if worker_image.seconds else "cached"
    print(f"\nworker image {worker_image.tag}: {worker_image.size_mb:.0f} MB ({took})")
    assert worker_image.size_mb <= MAX_IMAGE_MB
    code, out = _run(worker_image.tag, (
        "id -u; id -g; "
        "python -c \"import importlib.util as u; print(' '.join(m for m in "
        "('grove', 'workflows', 'activities', 'worker', 'localstack', 'bench', 'faults', 'tests') "
        "if u.find_spec(m)))\"; "
        "grove-temporal --help"))
    assert code == 0, out
    lines = out.splitlines()
    assert lines[:3] == ["10001", "10001", "grove workflows activities worker"], out
    # The development rooms' commands are absent from the CLI in the image (their modules are not there).
    assert "worker" in out and "validate" in out
    for dev_command in (" run ", " binaries ", " bench ", " faults ", " containers "):
        assert dev_command not in out, f"{dev_command.strip()!r} listed in the image's CLI"


async def test_worker_container_drives_a_pcs_and_drains_on_sigterm(
        engine: Engine, worker_image: Built, stack: LocalStack, cluster: Cluster, temporal_client: Client,
        tmp_path: Path) -> None:
    kubeconfig = readable_kubeconfig(Path(stack.kubeconfig), tmp_path / "kube")
    container, port = worker_container(worker_image.tag, kubeconfig=kubeconfig,
                                       temporal_address=stack.temporal_address, namespace=cluster.namespace,
                                       task_queue=f"tq-{cluster.namespace}")
    container.start()
    try:
        took = wait_ready(container, port)
        print(f"\nworker container ready {took:.1f}s after start")
        # Runs as the image's user, with nothing writable but /tmp.
        assert container.exec(["id", "-u"]).output.decode().strip() == "10001"
        denied = container.exec(["sh", "-c", "touch /opt/grove-temporal/x"])
        assert denied.exit_code != 0 and b"Read-only file system" in denied.output
        assert container.exec(["sh", "-c", "touch /tmp/x && echo ok"]).output.decode().strip() == "ok"

        cluster.apply(pcs_manifest("boxed", cluster.namespace, cliques=[clique("a", 2, 2)]))
        replica = Replica(temporal_client, cluster, "boxed")
        await replica.wait_phase(Phase.AVAILABLE, timeout=90)
        wait_for(lambda: ((cluster.pcs("boxed") or {}).get("status") or {}).get("availableReplicas") == 1,
                 timeout=30, what="PodCliqueSet status.availableReplicas == 1")

        # SIGTERM with an activity in flight (as tests/e2e/test_drain.py does): the container keeps running until
        # the activity completed, then exits 0.
        async with observe_held_in_flight(stack, replica.handle):
            wrapped = container.get_wrapped_container()
            wrapped.kill(signal="SIGTERM")
            told = time.monotonic()
            time.sleep(HOLD_SECONDS)
            wrapped.reload()
            assert wrapped.status == "running", "the worker must wait for its in-flight activity"
        code = container.wait()
        exited = time.monotonic() - told
        assert code == 0, logs(container)[-4000:]
        assert HOLD_SECONDS <= exited < 20 + 10, f"exited {exited:.1f}s after SIGTERM"
        history = await replica.handle.fetch_history()
        kinds = [e.event_type for e in history.events]
        last_scheduled = max(i for i, k in enumerate(kinds) if k == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED)
        assert EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED in kinds[last_scheduled:], "the activity completed"
        print(f"worker container exited 0 {exited:.1f}s after SIGTERM (apiserver held {HOLD_SECONDS:.0f}s)")
    finally:
        container.stop()
