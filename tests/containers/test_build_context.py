"""The build context deploy/Dockerfile gets, as each builder really sends it: the classic builder and BuildKit (what
compose v2 and Docker 23+ use) must both send exactly the product, pyproject.toml and README.md (the root
.dockerignore; BuildKit would prefer a deploy/Dockerfile.dockerignore, so there is none)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from localstack.engine import Engine
from localstack.images import PRODUCT_CONTEXT, REPO, Built

PROBE = """FROM {base}
COPY . /ctx
CMD ["sh", "-c", "cd /ctx && find . -type f | sort"]
"""


def expected_files() -> set[str]:
    files: set[str] = set()
    for entry in PRODUCT_CONTEXT:
        path = REPO / entry
        found = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
        files |= {f"./{p.relative_to(REPO)}" for p in found
                  if "__pycache__" not in p.parts and p.suffix != ".pyc" and ".egg-info" not in str(p)}
    return files


def buildkit_cli() -> str | None:
    """A docker CLI with BuildKit built in (Debian's docker.io 20.10 has it; a newer CLI needs the buildx plugin)."""
    for cli in (shutil.which("docker"), "/usr/bin/docker"):
        if cli and Path(cli).exists():
            probe = subprocess.run([cli, "buildx", "version"], capture_output=True, timeout=30)
            version = subprocess.run([cli, "--version"], capture_output=True, text=True, timeout=30).stdout
            if probe.returncode == 0 or " 20.10." in version:
                return cli
    return None


def context_seen(engine: Engine, cli: str, buildkit: bool, base: str, tmp_path: Path) -> set[str]:
    dockerfile = tmp_path / f"probe-{int(buildkit)}.Dockerfile"
    dockerfile.write_text(PROBE.format(base=base))
    tag = f"grove-temporal/context-probe:{int(buildkit)}"
    env = {**os.environ, **engine.env, "DOCKER_BUILDKIT": "1" if buildkit else "0"}
    build = subprocess.run([cli, "build", "-f", str(dockerfile), "-t", tag, str(REPO)], env=env,
                           capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    try:
        run = subprocess.run([cli, "run", "--rm", "--network", "host", tag], env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        return set(run.stdout.split())
    finally:
        subprocess.run([cli, "rmi", "-f", tag], env=env, capture_output=True, timeout=120)


def test_classic_builder_sends_the_product_only(engine: Engine, base_image: Built, tmp_path: Path) -> None:
    cli = shutil.which("docker")
    assert cli is not None
    assert context_seen(engine, cli, False, base_image.tag, tmp_path) == expected_files()


def test_buildkit_sends_the_same_context(engine: Engine, base_image: Built, tmp_path: Path) -> None:
    cli = buildkit_cli()
    if cli is None:
        pytest.skip("no docker CLI with BuildKit here (neither Debian's 20.10 CLI nor the buildx plugin)")
    assert context_seen(engine, cli, True, base_image.tag, tmp_path) == expected_files()
