"""Pinned executables of the local stack, cached outside the repository and keyed by version.

Each binary comes from, in this order: the cache (`$GROVE_TEMPORAL_BIN_DIR/<name>/<version>/<name>`), the official
release (checksum verified), or a build from Go modules through the module proxy (DESIGN §7). Installs are atomic:
a binary is built or downloaded into a temporary directory beside the cache and renamed into place last, so an
interrupted run never leaves a half-written binary that a later run would trust.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
TEMPORAL_CLI_VERSION = "v1.5.1"
# Container and chart tooling (localstack/containers.py, the Helm chart's tests); not needed to run the stack.
HELM_VERSION = "v3.22.0"
COMPOSE_VERSION = "v2.40.3"

Log = Callable[[str], None]


def stderr_log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


class BinaryUnavailableError(RuntimeError):
    """Neither the cache, a release download nor a Go build could provide a binary."""


@dataclass(frozen=True)
class GoRecipe:
    """How to build a binary from Go modules.

    Binaries sharing a `group` are built by one `go build` invocation so their common packages compile once.
    `{version}`, `{version_number}`, `{major}`, `{minor}` and `{build_date}` in ldflags are filled in at build time.
    """

    module: str
    package: str
    group: str
    replace_staging_modules: bool = False
    ldflags: tuple[str, ...] = ("-s", "-w")
    # Build inside the module's own downloaded directory (its go.mod and go.sum as published), for modules whose
    # go.mod has `exclude`/`replace` directives that `go install mod@version` refuses and a wrapper would ignore.
    in_module: bool = False
    # Newer versions of dependencies than the module's go.mod names, required beside it by the wrapper (Go's minimal
    # version selection then takes them): a fix the pinned release does not have yet. The binary is then no longer
    # the official release: it is never downloaded, and it is cached under its own key.
    requires: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ReleaseAsset:
    """An official release artefact and where its publisher states the sha256.

    checksum_kind: `sha256-file` (the URL holds just the digest), `sums-file` (lines of `<digest>  <file>`),
    `github-digest` (the GitHub release API's asset digest; for projects that publish no checksum file).
    """

    url: str
    checksum_kind: str
    checksum_url: str
    member: str | None = None  # the binary's path inside a .tar.gz; None when the asset is the binary itself


@dataclass(frozen=True)
class Binary:
    name: str
    version: str
    recipe: GoRecipe
    release: ReleaseAsset
    version_args: tuple[str, ...] = ("--version",)

    @property
    def cache_key(self) -> str:
        """The version, and every dependency the recipe raises (`v1.5.1+modernc.org-sqlite-v1.51.0`): a binary built
        with a different dependency is a different binary."""
        raised = "".join(f"+{module.replace('/', '-')}-{version}" for module, version in self.recipe.requires)
        return self.version + raised

    @property
    def official_release(self) -> bool:
        return not self.recipe.requires


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def _kubernetes_binary(name: str, version_args: tuple[str, ...] = ("--version",)) -> Binary:
    version = KUBERNETES_VERSION
    version_ldflags: list[str] = []
    # Without these the binaries report a placeholder version and clients/kwok see "v0.0.0-master".
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        version_ldflags += [
            f"-X {package}.gitVersion={{version}}",
            f"-X {package}.gitMajor={{major}}",
            f"-X {package}.gitMinor={{minor}}",
            f"-X {package}.gitTreeState=clean",
            f"-X {package}.buildDate={{build_date}}",
        ]
    url = f"https://dl.k8s.io/release/{version}/bin/linux/{_arch()}/{name}"
    return Binary(
        name=name,
        version=version,
        recipe=GoRecipe(
            module="k8s.io/kubernetes",
            package=f"k8s.io/kubernetes/cmd/{name}",
            group="kubernetes",
            replace_staging_modules=True,
            ldflags=("-s", "-w", *version_ldflags),
        ),
        release=ReleaseAsset(url=url, checksum_kind="sha256-file", checksum_url=url + ".sha256"),
        version_args=version_args,
    )


def _etcd() -> Binary:
    v = ETCD_VERSION
    base = f"https://github.com/etcd-io/etcd/releases/download/{v}"
    return Binary(
        name="etcd",
        version=v,
        recipe=GoRecipe(
            module="go.etcd.io/etcd/server/v3", package="go.etcd.io/etcd/server/v3", group="etcd"
        ),
        release=ReleaseAsset(
            url=f"{base}/etcd-{v}-linux-{_arch()}.tar.gz",
            checksum_kind="sums-file",
            checksum_url=f"{base}/SHA256SUMS",
            member=f"etcd-{v}-linux-{_arch()}/etcd",
        ),
    )


def _kwok() -> Binary:
    v = KWOK_VERSION
    return Binary(
        name="kwok",
        version=v,
        recipe=GoRecipe(
            module="sigs.k8s.io/kwok",
            package="sigs.k8s.io/kwok/cmd/kwok",
            group="kwok",
            ldflags=("-s", "-w", "-X sigs.k8s.io/kwok/pkg/consts.Version={version_number}"),
        ),
        release=ReleaseAsset(
            url=f"https://github.com/kubernetes-sigs/kwok/releases/download/{v}/kwok-linux-{_arch()}",
            checksum_kind="github-digest",
            checksum_url=f"https://api.github.com/repos/kubernetes-sigs/kwok/releases/tags/{v}",
        ),
    )


def _temporal() -> Binary:
    v = TEMPORAL_CLI_VERSION
    number = v.removeprefix("v")
    base = f"https://github.com/temporalio/cli/releases/download/{v}"
    return Binary(
        name="temporal",
        version=v,
        recipe=GoRecipe(
            module="github.com/temporalio/cli",
            package="github.com/temporalio/cli/cmd/temporal",
            group="temporal",
            # The same flags as the CLI's release build, so `temporal --version` reports 1.5.1.
            ldflags=("-s", "-w", "-X github.com/temporalio/cli/temporalcli.Version={version_number}"),
            # The release's SQLite driver (v1.34.1) interrupts every statement on the server's one connection when
            # a single request's context ends, and keeps failing later ones: while clients gave up on requests (a
            # deadline, a cancelled long poll), other clients' reads failed with "interrupted (9)" for seconds. The
            # driver of the CLI's v1.9.1 release does not: tests/localstack/test_temporal_store.py, 15 s of clients
            # cancelling requests after 1-15 ms beside four loops of reads, 11 of 92 reads failed with v1.34.1 and 0
            # of 390 with v1.51.0 (0 of 1,964 over two 40 s runs). v1.44.3, Temporal's first fix
            # (temporalio/temporal#9198), lost the in-memory store instead: "no such table: current_executions".
            requires=(("modernc.org/sqlite", "v1.51.0"),),
        ),
        release=ReleaseAsset(
            url=f"{base}/temporal_cli_{number}_linux_{_arch()}.tar.gz",
            checksum_kind="sums-file",
            checksum_url=f"{base}/checksums.txt",
            member="temporal",
        ),
    )


def _helm() -> Binary:
    v = HELM_VERSION
    url = f"https://get.helm.sh/helm-{v}-linux-{_arch()}.tar.gz"
    return Binary(
        name="helm",
        version=v,
        recipe=GoRecipe(
            module="helm.sh/helm/v3",
            package="helm.sh/helm/v3/cmd/helm",
            group="helm",
            ldflags=("-s", "-w", "-X helm.sh/helm/v3/internal/version.version={version}",
                     "-X helm.sh/helm/v3/internal/version.gitTreeState=clean"),
        ),
        release=ReleaseAsset(url=url, checksum_kind="sha256-file", checksum_url=url + ".sha256sum",
                             member=f"linux-{_arch()}/helm"),
        version_args=("version", "--short"),
    )


def _compose() -> Binary:
    v = COMPOSE_VERSION
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(_arch(), _arch())
    url = f"https://github.com/docker/compose/releases/download/{v}/docker-compose-linux-{machine}"
    return Binary(
        name="docker-compose",
        version=v,
        recipe=GoRecipe(
            module="github.com/docker/compose/v2",
            package="./cmd",
            group="docker-compose",
            ldflags=("-s", "-w", "-X github.com/docker/compose/v2/internal.Version={version}"),
            in_module=True,
        ),
        release=ReleaseAsset(url=url, checksum_kind="sha256-file", checksum_url=url + ".sha256"),
        version_args=("version",),
    )


BINARIES: dict[str, Binary] = {
    b.name: b
    for b in (
        _temporal(),
        _etcd(),
        _kubernetes_binary("kube-apiserver"),
        _kubernetes_binary("kube-scheduler"),
        _kubernetes_binary("kube-controller-manager"),
        _kubernetes_binary("kubectl", version_args=("version", "--client")),
        _kwok(),
        _helm(),
        _compose(),
    )
}
# What the local stack runs (`grove-temporal binaries`); helm and docker-compose are provided on demand.
STACK_BINARIES: tuple[str, ...] = (
    "temporal", "etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubectl", "kwok",
)


def bin_dir() -> Path:
    return Path(os.environ.get("GROVE_TEMPORAL_BIN_DIR") or Path.home() / ".cache" / "grove-temporal" / "bin")


def cached_path(binary: Binary, root: Path | None = None) -> Path:
    return (root or bin_dir()) / binary.name / binary.cache_key / binary.name


def manifest_path(binary: Binary, root: Path | None = None) -> Path:
    return cached_path(binary, root).parent / "manifest.json"


def is_cached(binary: Binary, root: Path | None = None) -> bool:
    path = cached_path(binary, root)
    return path.is_file() and os.access(path, os.X_OK) and manifest_path(binary, root).is_file()


@dataclass(frozen=True)
class Installed:
    name: str
    version: str
    path: Path
    obtained: str  # "cache (built from Go modules …)", "downloaded …", "built from Go modules …"
    seconds: float


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def install(binary: Binary, staged: Path, obtained: str, seconds: float, root: Path | None = None) -> Path:
    """Move a finished binary into the cache: manifest first, binary last (its presence means "installed")."""
    target = cached_path(binary, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    staged.chmod(0o755)
    manifest = {
        "name": binary.name,
        "version": binary.version,
        "sha256": sha256_of(staged),
        "obtained": obtained,
        "seconds": round(seconds, 1),
        "installed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    tmp_manifest = manifest_path(binary, root).with_suffix(".json.tmp")
    tmp_manifest.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp_manifest, manifest_path(binary, root))
    os.replace(staged, target)  # same filesystem: atomic
    return target


def read_manifest(binary: Binary, root: Path | None = None) -> dict[str, object]:
    try:
        data = json.loads(manifest_path(binary, root).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def staging_dir(root: Path) -> Iterator[Path]:
    """A temporary directory on the cache's filesystem, removed afterwards whatever happens."""
    (root / ".tmp").mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="stage-", dir=root / ".tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _exclusive(root: Path, log: Log) -> Iterator[None]:
    """Serialise installs across processes (several checkouts may share one cache)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".install.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process that is installing binaries into {root} …")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def ensure(
    names: Iterable[str] | None = None, log: Log = stderr_log, allow_download: bool = True
) -> list[Installed]:
    """Make every named binary (default: the local stack's) available in the cache and say how each was obtained."""
    from localstack import gobuild, release_download

    wanted = [BINARIES[n] for n in (names or STACK_BINARIES)]
    root = bin_dir()
    results: dict[str, Installed] = {}

    def from_cache(binary: Binary) -> Installed:
        how = read_manifest(binary, root).get("obtained", "unknown")
        return Installed(binary.name, binary.version, cached_path(binary, root), f"cache ({how})", 0.0)

    for binary in wanted:
        if is_cached(binary, root):
            results[binary.name] = from_cache(binary)
    missing = [b for b in wanted if b.name not in results]
    if missing:
        with _exclusive(root, log):
            for binary in missing:
                if is_cached(binary, root):  # another process installed it while we waited
                    results[binary.name] = from_cache(binary)
            missing = [b for b in missing if b.name not in results]
            if allow_download:
                for binary in (b for b in missing if b.official_release):
                    downloaded = release_download.try_download(binary, root, log)
                    if downloaded is not None:
                        results[binary.name] = downloaded
                missing = [b for b in missing if b.name not in results]
            groups: dict[str, list[Binary]] = {}
            for binary in missing:
                groups.setdefault(binary.recipe.group, []).append(binary)
            for group in groups.values():
                for installed in gobuild.build_group(group, root, log):
                    results[installed.name] = installed
    return [results[b.name] for b in wanted]


def path_of(name: str) -> Path:
    """The cached binary's path; raises when it has not been installed (run `grove-temporal binaries`)."""
    binary = BINARIES[name]
    path = cached_path(binary)
    if not is_cached(binary):
        raise BinaryUnavailableError(
            f"{name} {binary.version} is not in {bin_dir()}; run `grove-temporal binaries` first."
        )
    return path
