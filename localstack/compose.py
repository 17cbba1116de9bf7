"""docker compose here: the compose v2 plugin (built from Go modules, localstack/binaries.py) and
docker-compose.yml with deploy/compose/local-images.yml on top (images built here, the host's network).

docker-compose.yml itself is not changed: online it runs the official images as it is.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from localstack.engine import Engine, Log, containers_dir, docker_cli
from localstack.readiness import free_port

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
OVERRIDE_FILE = REPO / "deploy" / "compose" / "local-images.yml"
WORKER_UID = 10001  # deploy/Dockerfile's USER


def plugin_dir() -> Path:
    config = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    return Path(config) / "cli-plugins"


def install_plugin() -> Path:
    """Link the cached docker-compose binary as the docker CLI's `compose` plugin (user level, ~/.docker)."""
    from localstack.binaries import path_of

    binary = path_of("docker-compose")
    link = plugin_dir() / "docker-compose"
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.resolve() == binary.resolve():
            return link
        link.unlink()
    link.symlink_to(binary)
    return link


@dataclass
class LocalCompose:
    """One compose project on the local images: the argv prefix and the environment to run `docker compose`."""

    project: str
    env: dict[str, str]
    ports: dict[str, int] = field(default_factory=dict)

    @property
    def argv(self) -> list[str]:
        cli = docker_cli() or "docker"
        return [cli, "compose", "-f", str(COMPOSE_FILE), "-f", str(OVERRIDE_FILE), "-p", self.project]

    @property
    def temporal_address(self) -> str:
        return f"127.0.0.1:{self.env['GROVE_TEMPORAL_COMPOSE_TEMPORAL_PORT']}"

    @property
    def worker_port(self) -> int:
        return int(self.env["GROVE_TEMPORAL_COMPOSE_WORKER_PORT"])

    @classmethod
    def prepare(cls, engine: Engine, log: Log, *, project: str = "grove-temporal",
                kubeconfig: Path | None = None, fixed_ports: bool = True,
                extra_env: Mapping[str, str] | None = None) -> LocalCompose:
        """Images and plugin in place, a kubeconfig the worker's uid can read, ports chosen."""
        from localstack import images
        from localstack.binaries import ensure, stderr_log

        ensure(["docker-compose"], log=stderr_log)
        install_plugin()
        base = images.ensure_base(engine, log)
        worker = images.ensure_worker_image(engine, log, base=base)
        temporal = images.ensure_temporal_image(engine, log, base=base)
        names = ("TEMPORAL_PORT", "UI_PORT", "TEMPORAL_HTTP_PORT", "TEMPORAL_METRICS_PORT", "WORKER_PORT")
        defaults = (7233, 8080, 7243, 7244, 8081)
        env = {
            **engine.env,
            "GROVE_TEMPORAL_WORKER_IMAGE": worker.tag,
            "GROVE_TEMPORAL_TEMPORAL_IMAGE": temporal.tag,
            "GROVE_TEMPORAL_KUBECONFIG": str(readable_kubeconfig(kubeconfig or _default_kubeconfig(),
                                                                containers_dir() / "compose" / project)),
        }
        for name, default in zip(names, defaults, strict=True):
            key = f"GROVE_TEMPORAL_COMPOSE_{name}"
            env[key] = os.environ.get(key) or str(default if fixed_ports else free_port())
        env.update(extra_env or {})
        return cls(project, env)


class KubeconfigMissingError(RuntimeError):
    pass


def _default_kubeconfig() -> Path:
    """GROVE_TEMPORAL_KUBECONFIG, else KUBECONFIG (its first file), else the running local stack's (`grove-temporal
    run`, newest first), else ~/.kube/config; one clear error when that file does not exist."""
    if given := os.environ.get("GROVE_TEMPORAL_KUBECONFIG"):
        path, source = Path(given), "GROVE_TEMPORAL_KUBECONFIG"
    elif given := os.environ.get("KUBECONFIG"):
        path, source = Path(given.split(os.pathsep)[0]), "KUBECONFIG"
    else:
        from worker.stacks import live_records

        records = live_records()  # newest first
        if records:
            path, source = Path(records[0].kubeconfig), "the running stack"
        else:
            path, source = Path.home() / ".kube" / "config", "the default"
    if not path.is_file():
        raise KubeconfigMissingError(
            f"kubeconfig {path} ({source}) does not exist: set GROVE_TEMPORAL_KUBECONFIG or KUBECONFIG to the "
            "cluster the worker should drive")
    return path


def readable_kubeconfig(source: Path, directory: Path) -> Path:
    """A copy of `source` in `directory` that the container's user (uid 10001) may read, and nobody else when we
    are root (mounted read-only into the worker container)."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "kubeconfig"
    shutil.copyfile(source, target)
    if os.geteuid() == 0:
        os.chown(target, WORKER_UID, WORKER_UID)
        target.chmod(0o400)
    else:
        target.chmod(0o644)  # the file is already readable by this user; the container's uid needs it too
    return target
