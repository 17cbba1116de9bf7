"""What a result was measured on: machine, versions, git commit, command line, machine load."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def machine() -> dict[str, Any]:
    model = ""
    for line in _read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    mem_kib = next((int(line.split()[1]) for line in _read("/proc/meminfo").splitlines()
                    if line.startswith("MemTotal:")), 0)
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "loadavg_at_start": load_average(),
    }


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages: other work on the machine shows here, and skews every figure."""
    return [round(x, 2) for x in os.getloadavg()]


def versions(kube_version: str | None = None) -> dict[str, Any]:
    from localstack import binaries

    found: dict[str, Any] = {"python": platform.python_version()}
    for package in ("temporalio", "kubernetes", "pydantic"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = None
    found.update({
        "kube_apiserver": kube_version or binaries.KUBERNETES_VERSION,
        "temporal_cli": binaries.BINARIES["temporal"].cache_key,  # the release, and any dependency raised for it
        "etcd": binaries.ETCD_VERSION,
        "kwok": binaries.KWOK_VERSION,
    })
    return found


def git() -> dict[str, Any]:
    def run(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": run("rev-parse", "HEAD"), "branch": run("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty_paths": len([line for line in run("status", "--porcelain").splitlines() if line])}


def command_line() -> str:
    argv = list(sys.argv)
    if argv and argv[0].endswith(("grove-temporal", "cli.py")):
        argv[0] = "grove-temporal"
    return shlex.join(argv)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
