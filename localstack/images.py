"""Images built here without a registry (DESIGN §9), each tagged by a digest of what it is made of, so a warm
machine finds it in the engine and builds nothing:

- the **offline base**: Debian bookworm (`debootstrap --variant=minbase`, Debian's python3 is 3.11) with python3,
  venv and CA certificates; its root filesystem tarball is kept in the cache too, so a fresh engine imports it in
  seconds instead of bootstrapping again;
- the **worker image** from `deploy/Dockerfile`, unchanged, through its build args: the local base, and wheels
  built on the host (`pip wheel`, cached by the dependency list) served to the build over loopback;
- a **Temporal dev-server image** from the cached `temporal` binary (the compose override's Temporal).

Online the Dockerfile builds from `python:3.11-slim` and PyPI with no build args at all.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import threading
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from localstack.engine import Engine, EngineUnavailableError, Log, containers_dir, docker_cli, ensure_packages

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
# What the worker image's context holds (the root .dockerignore lets exactly these through).
PRODUCT_CONTEXT = ("pyproject.toml", "README.md", "grove", "workflows", "activities", "worker")

BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
# Left out of the base's root filesystem: package caches and lists, documentation, translations.
BASE_PRUNE = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/info",
              "usr/share/locale")
BASE_REPOSITORY = "grove-temporal/base"
WORKER_REPOSITORY = "grove-temporal"
TEMPORAL_REPOSITORY = "grove-temporal/temporal-dev"
TEMPORAL_UID = 10002


class ImageBuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Built:
    name: str
    tag: str
    size_mb: float
    seconds: float  # 0.0 when found in the engine
    how: str


def _digest(*parts: bytes | str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:12]


def docker(engine: Engine, *args: str, stdin: bytes | None = None, timeout: float = 1800,
           check: bool = True, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    cli = docker_cli()
    if cli is None:
        raise EngineUnavailableError("no docker client on PATH")
    env = {**os.environ, **engine.env, **(extra_env or {})}
    result = subprocess.run([cli, *args], input=stdin, env=env, capture_output=True, timeout=timeout)
    if check and result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).decode(errors="replace").splitlines()[-30:])
        raise ImageBuildError(f"`docker {' '.join(args[:3])} …` failed (exit {result.returncode}):\n{tail}")
    return result


def image_size_mb(engine: Engine, tag: str) -> float | None:
    result = docker(engine, "image", "inspect", "--format", "{{.Size}}", tag, check=False, timeout=60)
    if result.returncode != 0:
        return None
    return int(result.stdout.strip()) / 1e6


def _mirror() -> str:
    """The Debian mirror apt uses here (debootstrap fetches from the same place)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in path.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    return "http://deb.debian.org/debian"


# --- the offline base ------------------------------------------------------------------------------------------
def base_tag() -> str:
    recipe = json.dumps({"suite": BASE_SUITE, "packages": BASE_PACKAGES, "prune": BASE_PRUNE,
                         "arch": platform.machine()})
    return f"{BASE_REPOSITORY}:{BASE_SUITE}-{_digest(recipe)}"


def ensure_base(engine: Engine, log: Log) -> Built:
    tag = base_tag()
    if (size := image_size_mb(engine, tag)) is not None:
        return Built("base", tag, size, 0.0, "present in the engine")
    started = time.monotonic()
    tarball = containers_dir() / f"{tag.replace('/', '_').replace(':', '_')}.tar"
    how = f"imported from {tarball}"
    if not tarball.is_file():
        _bootstrap_rootfs(tarball, log)
        how = f"debootstrap {BASE_SUITE} ({', '.join(BASE_PACKAGES)}) from {_mirror()}, imported"
    with tarball.open("rb") as f:
        docker(engine, "import", "--change", "ENV LANG=C.UTF-8", "-", tag, stdin=f.read(), timeout=600)
    seconds = time.monotonic() - started
    size = image_size_mb(engine, tag) or 0.0
    log(f"base image {tag}: {how} in {seconds:.0f}s ({size:.0f} MB)")
    return Built("base", tag, size, seconds, how)


def _bootstrap_rootfs(tarball: Path, log: Log) -> None:
    ensure_packages({"debootstrap": "debootstrap"}, log)
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root to build the offline base image")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with _scratch(tarball.parent) as scratch:
        root = scratch / "rootfs"
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", BASE_SUITE, str(root),
               _mirror()]
        log(f"{' '.join(cmd)} … (a few minutes)")
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            tail = "\n".join((result.stdout + result.stderr).splitlines()[-15:])
            raise ImageBuildError(f"debootstrap failed (exit {result.returncode}):\n{tail}")
        for relative in BASE_PRUNE:
            target = root / relative
            if target.is_dir():
                for child in target.iterdir():
                    if child.is_dir() and not child.is_symlink():
                        shutil.rmtree(child)
                    else:
                        child.unlink()
        partial = scratch / "rootfs.tar"
        with tarfile.open(partial, "w") as tar:
            tar.add(root, arcname=".")
        os.replace(partial, tarball)  # whole or absent


@contextlib.contextmanager
def _scratch(parent: Path) -> Iterator[Path]:
    path = parent / f".scratch-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(parents=True)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# --- wheels from the host ---------------------------------------------------------------------------------------
def _requirements() -> list[str]:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    return [*pyproject["build-system"]["requires"], *pyproject["project"]["dependencies"]]


def ensure_wheels(log: Log) -> Path:
    """Wheels of every dependency and of the build backend, for the image's Python (cp311, this platform)."""
    requirements = _requirements()
    key = _digest(json.dumps(requirements), sys.version.split()[0].rsplit(".", 1)[0], platform.machine())
    target = containers_dir() / "wheels" / key
    if (target / ".complete").is_file():
        return target
    started = time.monotonic()
    with _scratch(target.parent) as scratch:
        cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check",
               "--wheel-dir", str(scratch), *requirements]
        log(f"pip wheel of {len(requirements)} requirements for the image …")
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise ImageBuildError(f"pip wheel failed:\n{result.stderr[-3000:]}")
        (scratch / ".complete").write_text(json.dumps(requirements))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(scratch, target)
        scratch.mkdir()  # for _scratch's cleanup
    log(f"wheels in {target} ({time.monotonic() - started:.0f}s)")
    return target


@contextlib.contextmanager
def serve_directory(directory: Path) -> Iterator[str]:
    """An HTTP server on loopback listing `directory` (what pip's --find-links reads); yields its URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="wheel-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


# --- the worker image -------------------------------------------------------------------------------------------
def _context_digest() -> str:
    """Digest of every file the worker image's build context holds, the Dockerfile and the .dockerignore."""
    h = hashlib.sha256()
    paths: list[Path] = [DOCKERFILE, REPO / ".dockerignore"]
    for entry in PRODUCT_CONTEXT:
        path = REPO / entry
        paths += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for path in paths:
        if "__pycache__" in path.parts or path.suffix == ".pyc" or ".egg-info" in str(path):
            continue
        h.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def worker_tag(base: str, wheels: Path) -> str:
    return f"{WORKER_REPOSITORY}:{_digest(_context_digest(), base, wheels.name)}"


def ensure_worker_image(engine: Engine, log: Log, *, base: Built | None = None) -> Built:
    """deploy/Dockerfile built offline: the local base and the host's wheels through its build args."""
    base = base or ensure_base(engine, log)
    wheels = ensure_wheels(log)
    tag = worker_tag(base.tag, wheels)
    if (size := image_size_mb(engine, tag)) is not None:
        return Built("worker", tag, size, 0.0, "present in the engine")
    started = time.monotonic()
    with serve_directory(wheels) as url:
        log(f"docker build -f deploy/Dockerfile -t {tag} (base {base.tag}, wheels {url}) …")
        docker(engine, "build", "--network", "host", "-f", str(DOCKERFILE), "-t", tag,
               "--build-arg", f"PYTHON_IMAGE={base.tag}", "--build-arg", "PIP_NO_INDEX=1",
               "--build-arg", f"PIP_FIND_LINKS={url}", "--build-arg", "PIP_TRUSTED_HOST=127.0.0.1",
               "--label", f"io.grove-temporal.context={_context_digest()}", str(REPO),
               extra_env={"DOCKER_BUILDKIT": "0"})
    seconds = time.monotonic() - started
    size = image_size_mb(engine, tag) or 0.0
    log(f"worker image {tag}: built in {seconds:.0f}s ({size:.0f} MB)")
    # The builder stage left untagged (classic builder); only ours, by label.
    docker(engine, "image", "prune", "--force", "--filter", "label=io.grove-temporal.context", check=False,
           timeout=300)
    return Built("worker", tag, size, seconds, "docker build (classic builder), offline")


# --- the Temporal dev server --------------------------------------------------------------------------------------
TEMPORAL_DOCKERFILE = f"""\
FROM {{base}}
COPY temporal /usr/local/bin/temporal
RUN groupadd --system --gid {TEMPORAL_UID} temporal \\
 && useradd --system --uid {TEMPORAL_UID} --gid {TEMPORAL_UID} --home-dir /data --create-home temporal
USER {TEMPORAL_UID}:{TEMPORAL_UID}
WORKDIR /data
ENTRYPOINT ["temporal"]
CMD ["server", "start-dev", "--ip", "0.0.0.0", "--db-filename", "/data/temporal.db"]
"""


def ensure_temporal_image(engine: Engine, log: Log, *, base: Built | None = None) -> Built:
    from localstack.binaries import BINARIES, path_of, sha256_of

    base = base or ensure_base(engine, log)
    binary = path_of("temporal")
    dockerfile = TEMPORAL_DOCKERFILE.format(base=base.tag)
    version = BINARIES["temporal"].version
    tag = f"{TEMPORAL_REPOSITORY}:{version}-{_digest(sha256_of(binary), dockerfile)}"
    if (size := image_size_mb(engine, tag)) is not None:
        return Built("temporal", tag, size, 0.0, "present in the engine")
    started = time.monotonic()
    with _scratch(containers_dir()) as context:
        shutil.copy2(binary, context / "temporal")
        (context / "Dockerfile").write_text(dockerfile)
        docker(engine, "build", "--network", "host", "-t", tag, str(context), extra_env={"DOCKER_BUILDKIT": "0"})
    seconds = time.monotonic() - started
    size = image_size_mb(engine, tag) or 0.0
    log(f"Temporal image {tag}: built in {seconds:.0f}s ({size:.0f} MB)")
    return Built("temporal", tag, size, seconds, f"temporal CLI {version} on the base image")
