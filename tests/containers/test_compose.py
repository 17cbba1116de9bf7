"""docker-compose.yml for real: `docker compose up --wait` with deploy/compose/local-images.yml on top (images
built here, host network; the file itself is what runs online with the official images). Temporal becomes healthy,
the setup job registers the search attributes, the worker becomes healthy, and a PodCliqueSet applied to the local
stack's apiserver reaches Available through the containerised worker."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from localstack.compose import LocalCompose
from localstack.engine import Engine
from localstack.stack import LocalStack
from localstack.temporal import SEARCH_ATTRIBUTES
from tests.e2e.harness import Cluster, Replica, clique, pcs_manifest
from workflows.contract import DEFAULT_TASK_QUEUE
from workflows.messages import Phase


def _compose(project: LocalCompose, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run([*project.argv, *args], env={**os.environ, **project.env}, capture_output=True,
                          text=True, timeout=timeout)


async def test_compose_up_wait_runs_temporal_and_a_worker_that_drives_a_pcs(
        engine: Engine, stack: LocalStack, cluster: Cluster, tmp_path: Path) -> None:
    project = LocalCompose.prepare(engine, print, project=f"gt-{cluster.namespace}",
                                   kubeconfig=Path(stack.kubeconfig), fixed_ports=False,
                                   extra_env={"GROVE_TEMPORAL_WATCH_NAMESPACE": cluster.namespace})
    config = _compose(project, "config", "--format", "json")
    assert config.returncode == 0, config.stderr
    services = json.loads(config.stdout)["services"]
    assert set(services) == {"temporal", "temporal-setup", "worker"}, "the official-images services are off"
    started = time.monotonic()
    try:
        up = _compose(project, "up", "--wait", "--wait-timeout", "300")
        took = time.monotonic() - started
        assert up.returncode == 0, f"{up.stdout}\n{up.stderr}\n{_compose(project, 'logs').stdout[-6000:]}"
        print(f"\ndocker compose up --wait: {took:.1f}s")
        out = _compose(project, "ps", "--all", "--format", "json").stdout.strip()
        ps = json.loads(out) if out.startswith("[") else [json.loads(ln) for ln in out.splitlines() if ln.strip()]
        state = {p["Service"]: (p["State"], p.get("Health", ""), p.get("ExitCode")) for p in ps}
        assert state["temporal"][:2] == ("running", "healthy"), state
        assert state["worker"][:2] == ("running", "healthy"), state
        assert state["temporal-setup"][0] == "exited" and state["temporal-setup"][2] == 0, state

        client = await Client.connect(project.temporal_address, data_converter=pydantic_data_converter)
        from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

        listed = await client.operator_service.list_search_attributes(ListSearchAttributesRequest(namespace="default"))
        assert set(SEARCH_ATTRIBUTES) <= set(listed.custom_attributes), "registered by the setup job"

        cluster.apply(pcs_manifest("composed", cluster.namespace, cliques=[clique("a", 2, 2)]))
        replica = Replica(client, cluster, "composed")
        await replica.wait_phase(Phase.AVAILABLE, timeout=120)
        description = await replica.handle.describe()
        assert description.task_queue == DEFAULT_TASK_QUEUE
    finally:
        down = _compose(project, "down", "--volumes", "--timeout", "45")
        assert down.returncode == 0, down.stderr
