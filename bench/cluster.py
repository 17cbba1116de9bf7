"""The stack a benchmark runs on: a fresh LocalStack it owns (the CLI) or one it borrows (the smoke tests), with
the CRDs applied, its own namespaces, a Temporal client, and worker processes it starts and always stops."""

from __future__ import annotations

import contextlib
import math
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from activities.kubeapi import Kube, KubeError, Resource
from bench import interrupt, procs, strain
from localstack.workerproc import WorkerProcess

if TYPE_CHECKING:
    from localstack.stack import LocalStack, StackOptions

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
PODS_PER_NODE = 250


class BenchCluster:
    def __init__(self, stack: LocalStack, client: Client, owned: bool) -> None:
        self.stack = stack
        self.client = client
        self.owned = owned
        self.api_client = stack.kube_client()
        # The harness keeps a 30 s timeout in total, not the product's 10 s of silence: its slow answer on a saturated
        # stack is no finding of the benchmark, and would end an hour's run.
        self.kube = Kube(self.api_client, timeout=30.0)
        self.namespaces: list[str] = []
        self.workers: list[WorkerProcess] = []
        self.kube_version = str(self.kube._request("GET", "/version").get("gitVersion", ""))

    @property
    def log_dir(self) -> Path:
        return Path(self.stack.run_dir) / "bench"

    def namespace(self, prefix: str) -> str:
        """A fresh namespace, usable for pods (its default ServiceAccount exists)."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kube.create(NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        self.namespaces.append(name)
        deadline = time.monotonic() + 60
        while self.kube.get(SERVICEACCOUNTS, name, "default") is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name}: no default ServiceAccount after 60s")
            interrupt.pause(0.05)
        return name

    def worker(self, namespace: str, *, name: str = "", extra_env: dict[str, str] | None = None,
               extra_args: list[str] | None = None) -> WorkerProcess:
        proc = WorkerProcess(kubeconfig=Path(self.stack.kubeconfig), temporal_address=self.stack.temporal_address,
                             namespace=namespace, log_dir=self.log_dir,
                             task_queue=f"bench-{namespace}", log_level="WARNING",
                             bytecode_cache=True, name=name, extra_env=extra_env or {}, extra_args=extra_args or [])
        self.workers.append(proc)
        return proc.start()

    def stack_cpu(self) -> dict[str, float]:
        """CPU seconds each stack process has used so far (temporal, kube-apiserver, etcd, ...), from /proc."""
        found = {}
        for name, component in self.stack.components.items():
            pid = component.process.pid
            if pid is not None:
                with contextlib.suppress(OSError):
                    found[name] = procs.sample(pid).cpu_seconds
        return found

    def stack_cpu_since(self, before: dict[str, float]) -> dict[str, float]:
        """CPU seconds each stack process has used since `before` (a `stack_cpu()` reading), to 0.1 s."""
        return {k: round(v - before.get(k, 0.0), 1) for k, v in self.stack_cpu().items()}

    def strain(self) -> dict[str, int]:
        """The stack's strain counters so far (bench/strain.py): KWOK's refused plays, pod watches cut off."""
        kwok = self.stack.components.get("kwok")
        response = self.kube._request("GET", "/metrics", stream=True)
        try:
            metrics = response.read().decode()
        finally:
            response.release_conn()
        return {"kwok_rejected_plays": strain.rejected_plays(kwok.process.log_path) if kwok is not None else 0,
                "terminated_pod_watchers": strain.terminated_pod_watchers(metrics)}

    def strain_since(self, before: dict[str, int]) -> dict[str, int]:
        return strain.since(self.strain(), before)

    def close(self) -> None:
        for proc in self.workers:
            proc.stop()
        if not self.owned:  # a borrowed stack lives on: leave it as we found it
            for name in self.namespaces:
                with contextlib.suppress(KubeError):
                    self.kube.delete(NAMESPACES, None, name)
        self.api_client.close()


def stack_options(pods: int) -> StackOptions:
    """Enough fake-node capacity for `pods` pods with room to spare."""
    from localstack.kwok import NodeShape
    from localstack.stack import StackOptions

    nodes = max(3, math.ceil(pods * 1.25 / PODS_PER_NODE))
    return StackOptions(nodes=nodes, node_shape=NodeShape(cpu="1000", memory="4Ti", pods=PODS_PER_NODE),
                        headless_ui=True)


@contextlib.asynccontextmanager
async def bench_cluster(pods: int, stack: LocalStack | None = None) -> AsyncIterator[BenchCluster]:
    """A started stack with CRDs (fresh unless `stack` is given), stopped (or cleaned) afterwards."""
    from localstack.crds import apply_crds
    from localstack.stack import LocalStack

    owned = stack is None
    if stack is None:
        stack = LocalStack(stack_options(pods)).start()
    try:
        api = stack.kube_client()
        try:
            apply_crds(api)
        finally:
            api.close()
        client = await Client.connect(stack.temporal_address, data_converter=pydantic_data_converter)
        cluster = BenchCluster(stack, client, owned)
        try:
            yield cluster
        finally:
            cluster.close()
    finally:
        if owned:
            stack.stop()


class Clusters:
    """Hands scenarios their stacks: the borrowed one every time, or a fresh one per request."""

    def __init__(self, stack: LocalStack | None = None) -> None:
        self.stack = stack
        self.kube_version: str | None = None

    @contextlib.asynccontextmanager
    async def cluster(self, pods: int) -> AsyncIterator[BenchCluster]:
        async with bench_cluster(pods, self.stack) as cluster:
            self.kube_version = cluster.kube_version
            yield cluster
