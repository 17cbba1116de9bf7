"""LocalStack: the whole real stack on loopback, started concurrently, stopped without leaving a process behind.

    Temporal dev server ──────────────────────────────┐
    etcd → kube-apiserver → kube-scheduler            ├─ ready
                          → kube-controller-manager   │
                          → KWOK + fake nodes ────────┘

Stopping happens in `stop()`, at interpreter exit (atexit) and on SIGTERM/SIGHUP; SIGINT arrives as
KeyboardInterrupt and unwinds into the same `stop()`. A run killed with SIGKILL is cleaned up by the next start.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

from localstack import binaries, pki, rundirs
from localstack.binaries import Log, stderr_log
from localstack.etcd import Etcd
from localstack.kube import (
    ADMIN,
    CONTROLLER_MANAGER,
    KWOK,
    SCHEDULER,
    ApiServer,
    ControllerManager,
    Scheduler,
)
from localstack.kubeconfig import KubeUser, write_kubeconfig, write_token_file
from localstack.kwok import Kwok, NodeShape
from localstack.processes import ManagedProcess, ProcessRegistry, StackStartError, stop_all
from localstack.readiness import wait_until
from localstack.temporal import TemporalDevServer

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


_STOP_FIRST = ("kwok", "kube-controller-manager", "kube-scheduler", "temporal")
PORT_CLASH_ATTEMPTS = 3


class Component(Protocol):
    process: ManagedProcess

    def start(self) -> None: ...

    def wait_ready(self, timeout: float = ...) -> float: ...


@dataclass(frozen=True)
class StackOptions:
    nodes: int = 3
    node_shape: NodeShape = field(default_factory=NodeShape)
    run_dir: Path | None = None  # default: a fresh directory under $GROVE_TEMPORAL_STATE_DIR
    temporal_db_file: Path | None = None  # default: in-memory SQLite
    temporal_dynamic_config: dict[str, object] = field(default_factory=dict)
    temporal_namespaces: tuple[str, ...] = ()
    headless_ui: bool = False
    kubernetes: bool = True  # False: Temporal dev server only
    gang_scheduling: bool = True  # Kubernetes' own gang scheduling (PodGroup API, GangScheduling); localstack/kube.py


class LocalStack:
    def __init__(self, options: StackOptions | None = None, log: Log = stderr_log) -> None:
        self.options = options or StackOptions()
        self.log = log
        self.timings: dict[str, float] = {}
        self.components: dict[str, Component] = {}
        self.temporal: TemporalDevServer | None = None
        self.apiserver: ApiServer | None = None
        self._node_counter = 0
        self._stopped = True
        self._admin = KubeUser(ADMIN, ("system:masters",))
        self._registry: ProcessRegistry | None = None
        self.run_dir = Path()
        self.kubeconfig = Path()

    # ----------------------------------------------------------------------------------------------- addresses
    @property
    def temporal_address(self) -> str:
        return self._require_temporal().address

    @property
    def temporal_ui_url(self) -> str:
        return self._require_temporal().ui_url

    @property
    def kube_api_url(self) -> str:
        if self.apiserver is None:
            raise StackStartError("this stack runs no Kubernetes control plane")
        return self.apiserver.url

    def _require_temporal(self) -> TemporalDevServer:
        if self.temporal is None:
            raise StackStartError("the stack has not been started")
        return self.temporal

    # ------------------------------------------------------------------------------------------------- start
    def start(self) -> LocalStack:
        started = time.monotonic()
        names = ["temporal"]
        if self.options.kubernetes:
            names += ["etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"]
        paths = {i.name: i.path for i in binaries.ensure(names, log=self.log)}
        self.timings["binaries"] = time.monotonic() - started

        for leftover in rundirs.sweep_stale_runs():
            self.log(f"killed leftover of a crashed run: {leftover}")
        self.run_dir = self.options.run_dir or rundirs.new_run_dir()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for leftover in rundirs.reclaim(self.run_dir):
            self.log(f"killed leftover of a crashed run in {self.run_dir}: {leftover}")
        registry = ProcessRegistry(self.run_dir)
        registry.claim(rundirs.owner_token())
        self._registry = registry
        _track(self)
        self._stopped = False

        for attempt in range(1, PORT_CLASH_ATTEMPTS + 1):
            try:
                self._launch(paths, registry)
                break
            except StackStartError as error:
                if "address already in use" not in str(error) or attempt == PORT_CLASH_ATTEMPTS:
                    self.stop()
                    raise
                # Ports are picked free but bound a moment later; another stack on this machine can win the race.
                self.log(
                    f"a port was taken meanwhile ({error.args[0].splitlines()[0]}); retrying with new ports"
                )
                self._stop_processes(grace=3.0)
                shutil.rmtree(
                    self.run_dir / "etcd", ignore_errors=True
                )  # its member record names the old ports
            except BaseException:
                self.stop()
                raise
        self.timings["total"] = time.monotonic() - started
        self.log(self.describe_timings())
        return self

    def _launch(self, paths: dict[str, Path], registry: ProcessRegistry) -> None:
        self.components = {}
        self.apiserver = None
        self._node_counter = 0
        self.temporal = TemporalDevServer(
            paths["temporal"],
            self.run_dir,
            registry,
            db_file=self.options.temporal_db_file,
            dynamic_config=self.options.temporal_dynamic_config,
            namespaces=self.options.temporal_namespaces,
            headless=self.options.headless_ui,
        )
        self.components["temporal"] = self.temporal
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="stack-start") as pool:
            temporal_ready = pool.submit(self._start_component, "temporal")
            kube_ready: Future[None] | None = None
            if self.options.kubernetes:
                kube_ready = pool.submit(self._start_kubernetes, paths, registry)
            temporal_ready.result()
            if kube_ready is not None:
                kube_ready.result()

    def _start_component(self, name: str) -> None:
        component = self.components[name]
        began = time.monotonic()
        component.start()
        component.wait_ready()
        self.timings[name] = time.monotonic() - began

    def _start_kubernetes(self, paths: dict[str, Path], registry: ProcessRegistry) -> None:
        from localstack.nodes import create_nodes, wait_nodes_ready

        run_dir = self.run_dir
        certs = pki.generate(run_dir / "pki")
        scheduler_user = KubeUser(SCHEDULER)
        controller_manager_user = KubeUser(CONTROLLER_MANAGER, ("system:masters",))
        kwok_user = KubeUser(KWOK, ("system:masters",))  # plays every kubelet: node and pod status, leases
        token_file = run_dir / "pki" / "tokens.csv"
        write_token_file(token_file, [self._admin, scheduler_user, controller_manager_user, kwok_user])

        etcd = Etcd(paths["etcd"], run_dir, registry)
        gangs = self.options.gang_scheduling
        apiserver = ApiServer(
            paths["kube-apiserver"], run_dir, registry, etcd, certs, token_file, self._admin, gang_scheduling=gangs
        )
        scheduler = Scheduler(paths["kube-scheduler"], run_dir, registry, gang_scheduling=gangs)
        controller_manager = ControllerManager(paths["kube-controller-manager"], run_dir, registry, certs,
                                               gang_scheduling=gangs)
        kwok = Kwok(paths["kwok"], run_dir, registry)
        self.apiserver = apiserver
        self.components.update(
            {
                "etcd": etcd,
                "kube-apiserver": apiserver,
                "kube-scheduler": scheduler,
                "kube-controller-manager": controller_manager,
                "kwok": kwok,
            }
        )
        # Our own CA means every kubeconfig can be written before kube-apiserver exists.
        self.kubeconfig = run_dir / "kubeconfig"
        write_kubeconfig(self.kubeconfig, apiserver.url, certs.ca_cert, self._admin)
        scheduler.write_kubeconfig(apiserver.url, certs.ca_cert, scheduler_user)
        controller_manager.write_kubeconfig(apiserver.url, certs.ca_cert, controller_manager_user)
        kwok.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        write_kubeconfig(kwok.kubeconfig, apiserver.url, certs.ca_cert, kwok_user)

        self._start_component("etcd")
        self._start_component("kube-apiserver")
        with ThreadPoolExecutor(max_workers=3, thread_name_prefix="stack-kube") as pool:
            waits = [
                pool.submit(self._start_component, n)
                for n in ("kube-scheduler", "kube-controller-manager", "kwok")
            ]
            with self.kube_client() as api:
                from kubernetes.client import CoreV1Api

                core = CoreV1Api(api)
                node_names = self._next_node_names(self.options.nodes)
                create_nodes(core, node_names, self.options.node_shape)
                for wait in waits:
                    wait.result()
                began = time.monotonic()
                wait_nodes_ready(core, list(node_names))
                self.timings["nodes"] = time.monotonic() - began
                # Namespaces are usable once the service-account controller gave "default" its ServiceAccount
                # (pods are rejected without it).
                wait_until(
                    lambda: bool(core.read_namespaced_service_account("default", "default")),
                    "kube-controller-manager (default ServiceAccount)",
                    60,
                    controller_manager.process,
                )
                self.timings["serviceaccount"] = time.monotonic() - began

    def describe_timings(self) -> str:
        order = [
            "binaries",
            "temporal",
            "etcd",
            "kube-apiserver",
            "kube-scheduler",
            "kube-controller-manager",
            "kwok",
            "nodes",
            "serviceaccount",
            "total",
        ]
        parts = [f"{k} {self.timings[k]:.1f}s" for k in order if k in self.timings]
        return "stack ready: " + ", ".join(parts)

    # -------------------------------------------------------------------------------------------------- stop
    def stop(self, grace: float = 10.0) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._stop_processes(grace)
        _untrack(self)

    def _stop_processes(self, grace: float) -> None:
        # Clients of kube-apiserver first, then the apiserver, then its store: an apiserver whose etcd vanished
        # keeps retrying until the grace period runs out.
        for wave in (_STOP_FIRST, ("kube-apiserver",), ("etcd",)):
            stop_all([c.process for name, c in self.components.items() if name in wave], grace)
        # Whatever else runs, e.g. servers from add_temporal_server.
        stop_all([c.process for c in self.components.values()], grace)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------------------- components and helpers
    def kube_client(self) -> ApiClient:
        """A fresh ApiClient for the admin kubeconfig (never touches the kubernetes package's global config)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def stop_component(self, name: str, grace: float = 10.0) -> None:
        self.components[name].process.stop(grace)

    def kill_component(self, name: str) -> None:
        self.components[name].process.kill()

    def start_component(self, name: str) -> float:
        """Start a stopped component again (same ports, same data) and wait until it is ready."""
        began = time.monotonic()
        self.components[name].start()
        self.components[name].wait_ready()
        return time.monotonic() - began

    def restart_temporal(self) -> float:
        """Restart the stack's Temporal dev server on its port (and DB file, if any); seconds until ready."""
        return self._require_temporal().restart()

    def add_temporal_server(
        self,
        name: str,
        *,
        db_file: Path | None = None,
        dynamic_config: dict[str, object] | None = None,
        headless: bool = True,
    ) -> TemporalDevServer:
        """Start one more Temporal dev server (e.g. with test-only dynamic config); stopped with the stack."""
        if self._registry is None:
            raise StackStartError("start the stack before adding servers to it")
        if name in self.components:
            raise ValueError(f"the stack already has a component named {name!r}")
        server = TemporalDevServer(
            binaries.path_of("temporal"),
            self.run_dir,
            self._registry,
            name=name,
            db_file=db_file,
            dynamic_config=dynamic_config,
            headless=headless,
        )
        self.components[name] = server
        self._start_component(name)
        return server

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> ManagedProcess:
        """Start a process of ours beside the stack (e.g. the worker): logged under logs/<name>.log and recorded
        in state.json, so a crashed run's leftovers are reaped like the stack's. The caller stops it (before the
        stack, since it talks to the stack)."""
        if self._registry is None:
            raise StackStartError("start the stack before spawning processes beside it")
        process = ManagedProcess(name, argv, self.run_dir / "logs" / f"{name}.log", self._registry, env=env)
        process.start()
        return process

    def _next_node_names(self, count: int) -> dict[str, int]:
        indexes = range(self._node_counter, self._node_counter + count)
        self._node_counter += count
        return {f"kwok-node-{i}": i for i in indexes}

    def add_nodes(
        self, count: int = 1, shape: NodeShape | None = None, labels: dict[str, str] | None = None,
        ready_timeout: float = 30.0,
    ) -> list[str]:
        """Create `count` more fake nodes and wait until KWOK reports them Ready (StackStartError after
        `ready_timeout`)."""
        from kubernetes.client import CoreV1Api

        from localstack.nodes import create_nodes, wait_nodes_ready

        names = self._next_node_names(count)
        with self.kube_client() as api:
            core = CoreV1Api(api)
            create_nodes(core, names, shape or self.options.node_shape, labels)
            wait_nodes_ready(core, list(names), timeout=ready_timeout)
        return list(names)

    def lose_node(self, name: str) -> None:
        """The machine behind `name` dies and the cloud removes the Node (see nodes.lose_node for timing)."""
        from kubernetes.client import CoreV1Api

        from localstack.nodes import lose_node

        with self.kube_client() as api:
            lose_node(CoreV1Api(api), name)

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running component, summed over its process group."""
        groups = {name: c.process.pid for name, c in self.components.items() if c.process.running()}
        totals = dict.fromkeys(groups, 0)
        by_pgid = {pgid: name for name, pgid in groups.items() if pgid is not None}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                pgid = os.getpgid(int(entry.name))
                if pgid in by_pgid:
                    for line in (entry / "status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            totals[by_pgid[pgid]] += int(line.split()[1]) * 1024
        return totals


# ------------------------------------------------------------------------------ stop on exit and on signals
_live: set[LocalStack] = set()
_live_lock = threading.Lock()
_hooks_installed = False


def _stop_live_stacks() -> None:
    with _live_lock:
        stacks = list(_live)
    for stack in stacks:
        with contextlib.suppress(Exception):
            stack.stop(grace=5.0)


def _on_termination_signal(signum: int, frame: FrameType | None) -> None:
    _stop_live_stacks()
    raise SystemExit(128 + signum)


def _track(stack: LocalStack) -> None:
    global _hooks_installed
    with _live_lock:
        _live.add(stack)
        if _hooks_installed:
            return
        _hooks_installed = True
    atexit.register(_stop_live_stacks)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            # Respect a handler somebody else installed (the worker, a test runner); ours only replaces the
            # default, which would end Python without running atexit.
            if signal.getsignal(sig) is signal.SIG_DFL:
                signal.signal(sig, _on_termination_signal)


def _untrack(stack: LocalStack) -> None:
    with _live_lock:
        _live.discard(stack)


@contextlib.contextmanager
def running_stack(options: StackOptions | None = None, log: Log = stderr_log) -> Iterator[LocalStack]:
    stack = LocalStack(options, log)
    try:
        yield stack.start()
    finally:
        stack.stop()
