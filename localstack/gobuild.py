"""Build pinned binaries from Go modules through the module proxy (DESIGN §7).

A throw-away wrapper module requires the binary's module at the pinned version and `go build`s its main packages.
For Kubernetes, the published k8s.io/kubernetes go.mod requires its staging modules (k8s.io/api, client-go, …) at
`v0.0.0` and relies on `replace` directives that only apply inside the kubernetes repository; the wrapper therefore
replaces each of them with the matching published `v0.Y.Z`. All Kubernetes binaries are built by a single
`go build` so the thousands of packages they share compile once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

from localstack.binaries import (
    Binary,
    BinaryUnavailableError,
    Installed,
    Log,
    install,
    staging_dir,
)

HEARTBEAT_SECONDS = 60.0


def _escape_module_path(module: str) -> str:
    # The proxy protocol encodes upper-case letters as "!" + lower-case.
    return re.sub(r"[A-Z]", lambda m: "!" + m.group(0).lower(), module)


def _go_env(go: str, *names: str) -> list[str]:
    out = subprocess.run([go, "env", *names], check=True, capture_output=True, text=True).stdout
    return out.splitlines()


def build_env() -> dict[str, str]:
    env = dict(os.environ)
    # Pure-Go binaries (CGO off) run on any Linux; -mod=mod lets the wrapper resolve and record go.sum itself.
    env.update({"CGO_ENABLED": "0", "GOFLAGS": "-mod=mod", "GOWORK": "off", "GO111MODULE": "on"})
    return env


class _ModuleSource:
    """Reads `.mod`/`.info` of a module version: from the first HTTP proxy in GOPROXY, else via `go mod download`."""

    def __init__(self, go: str, env: dict[str, str]) -> None:
        self.go = go
        self.env = env
        proxies = _go_env(go, "GOPROXY")[0].replace("|", ",").split(",")
        self.proxy = next((p.rstrip("/") for p in proxies if p.startswith(("http://", "https://"))), None)

    def _via_proxy(self, module: str, version: str, suffix: str) -> str | None:
        if self.proxy is None:
            return None
        url = f"{self.proxy}/{_escape_module_path(module)}/@v/{version}{suffix}"
        try:
            with urllib.request.urlopen(url, timeout=60) as response:
                return bytes(response.read()).decode()
        except (urllib.error.URLError, OSError):
            return None

    def _via_go(self, module: str, version: str) -> dict[str, str]:
        result = subprocess.run(
            [self.go, "mod", "download", "-json", f"{module}@{version}"],
            capture_output=True,
            text=True,
            env=self.env,
        )
        info = json.loads(result.stdout or "{}")
        if result.returncode != 0 or "GoMod" not in info:
            reason = info.get("Error") or result.stderr.strip() or "unknown error"
            raise BinaryUnavailableError(
                f"cannot fetch {module}@{version} through the Go module proxy: {reason}"
            )
        return {str(k): str(v) for k, v in info.items()}

    def module_dir(self, module: str, version: str) -> str:
        """The module's source directory in the module cache (downloaded if needed)."""
        return self._via_go(module, version)["Dir"]

    def go_mod(self, module: str, version: str) -> str:
        text = self._via_proxy(module, version, ".mod")
        if text is None:
            text = Path(self._via_go(module, version)["GoMod"]).read_text()
        return text

    def release_time(self, module: str, version: str) -> str:
        text = self._via_proxy(module, version, ".info")
        stamp = json.loads(text).get("Time") if text else None
        if not stamp:
            return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).strftime("%Y-%m-%dT%H:%M:%SZ")


def go_directive(go_mod: str) -> str | None:
    match = re.search(r"^go\s+(\S+)\s*$", go_mod, re.MULTILINE)
    return match.group(1) if match else None


def staging_replacements(kubernetes_go_mod: str, kubernetes_version: str) -> dict[str, str]:
    """Every k8s.io module the published kubernetes go.mod requires at exactly v0.0.0 -> its v0.Y.Z release."""
    minor, patch = kubernetes_version.removeprefix("v").split(".")[1:3]
    staging_version = f"v0.{minor}.{patch}"
    required_at_zero = re.findall(
        r"^\s*(?:require\s+)?(k8s\.io/\S+)\s+v0\.0\.0\s*(?://.*)?$", kubernetes_go_mod, re.M
    )
    return {module: staging_version for module in sorted(set(required_at_zero))}


def wrapper_go_mod(module: str, version: str, go_version: str | None, replacements: dict[str, str],
                   requires: tuple[tuple[str, str], ...] = ()) -> str:
    lines = ["module grove-temporal.local/binaries", ""]
    if go_version:
        lines += [f"go {go_version}", ""]
    lines += [f"require {module} {version}", ""]
    if requires:  # raised dependencies: minimal version selection takes these over the module's own
        lines.append("require (")
        lines += [f"\t{m} {v}" for m, v in requires]
        lines += [")", ""]
    if replacements:
        lines.append("replace (")
        lines += [f"\t{m} => {m} {v}" for m, v in replacements.items()]
        lines.append(")")
    return "\n".join(lines) + "\n"


def _ldflags(binary: Binary, build_date: str) -> str:
    number = binary.version.removeprefix("v")
    major, minor = number.split(".")[:2]
    fields = {"version": binary.version, "version_number": number, "major": major, "minor": minor}
    return " ".join(flag.format(build_date=build_date, **fields) for flag in binary.recipe.ldflags)


def _run_with_heartbeat(cmd: list[str], cwd: Path, env: dict[str, str], log_file: Path, log: Log) -> None:
    started = time.monotonic()
    with log_file.open("w") as out:
        # Own process group: an interrupted build takes its compiler and linker children down with it.
        process = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            while True:
                try:
                    process.wait(timeout=HEARTBEAT_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    log(f"  … still building ({time.monotonic() - started:.0f}s)")
        except BaseException:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise
    if process.returncode != 0:
        tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-25:])
        raise BinaryUnavailableError(
            f"`{' '.join(cmd[:2])} …` failed (exit {process.returncode}); log {log_file}:\n{tail}"
        )


def _check_version(binary: Binary, path: Path) -> str:
    """The built binary must report the pinned version; a placeholder means the ldflags did not apply."""
    result = subprocess.run([str(path), *binary.version_args], capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip()
    if binary.version.removeprefix("v") not in output:
        raise BinaryUnavailableError(
            f"built {binary.name} reports {output!r}, expected version {binary.version}"
        )
    return output.splitlines()[0] if output else ""


def build_group(binaries: list[Binary], root: Path, log: Log) -> list[Installed]:
    """Build `binaries` (all from the same module and version) with one `go build`, then install each."""
    names = ", ".join(b.name for b in binaries)
    go = shutil.which("go")
    if go is None:
        raise BinaryUnavailableError(
            f"Cannot provide {names}: the official release could not be downloaded and there is no `go` on PATH "
            "to build it from Go modules (install Go, or allow downloads, or fill $GROVE_TEMPORAL_BIN_DIR)."
        )
    first = binaries[0]
    module, version = first.recipe.module, first.version
    env = build_env()
    source = _ModuleSource(go, env)
    go_version = _go_env(go, "GOVERSION")[0]

    step = time.monotonic()
    upstream = source.go_mod(module, version)
    replacements = staging_replacements(upstream, version) if first.recipe.replace_staging_modules else {}
    build_date = source.release_time(module, version)
    log(
        f"{names}: fetched {module}@{version} go.mod in {time.monotonic() - step:.1f}s"
        + (
            f" ({len(replacements)} staging modules replaced with v0.{version.split('.')[1]}.x)"
            if replacements
            else ""
        )
    )

    logs = root / ".logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_file = logs / f"build-{first.recipe.group}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    if first.recipe.in_module and first.recipe.requires:
        raise ValueError(f"{names}: a build in the module's own directory cannot raise dependencies")
    with tempfile.TemporaryDirectory(prefix="grove-temporal-gobuild-") as wrapper, staging_dir(root) as out:
        if first.recipe.in_module:
            # The module's own directory in the module cache, built with its published go.mod and go.sum as they
            # are (read-only there, so nothing may rewrite them).
            build_dir = Path(source.module_dir(module, version))
            env = {**env, "GOFLAGS": "-mod=readonly"}
        else:
            build_dir = Path(wrapper)
            Path(wrapper, "go.mod").write_text(
                wrapper_go_mod(module, version, go_directive(upstream), replacements, first.recipe.requires)
            )
        packages = [b.recipe.package for b in binaries]
        # One package: name the output explicitly (etcd's package path ends in "v3"); several: a directory.
        target = str(out / first.name) if len(binaries) == 1 else str(out) + os.sep
        trim = ["-trimpath"] if first.recipe.in_module else []  # no build-machine paths in the binary
        cmd = [go, "build", *trim, "-ldflags", _ldflags(first, build_date), "-o", target, *packages]
        log(f"{names}: go build ({go_version}, CGO_ENABLED=0) of {' '.join(packages)} in {build_dir}; "
            f"log {log_file}")
        step = time.monotonic()
        _run_with_heartbeat(cmd, build_dir, env, log_file, log)
        seconds = time.monotonic() - step
        log(f"{names}: built in {seconds:.1f}s")

        installed = []
        for binary in binaries:
            staged = out / binary.name
            reported = _check_version(binary, staged)
            raised = "".join(f", {m}@{v}" for m, v in binary.recipe.requires)
            obtained = f"built from Go modules ({module}@{version}{raised}, {go_version})"
            path = install(binary, staged, obtained, seconds, root)
            log(f"{binary.name}: installed {path} ({reported})")
            installed.append(Installed(binary.name, binary.version, path, obtained, seconds))
    return installed
