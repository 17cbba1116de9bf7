"""`grove-temporal containers …`: the container tooling of the development room (DESIGN §9).

    grove-temporal containers engine     # a Docker Engine that answers (installed and started here if need be)
    grove-temporal containers tools      # docker compose v2 (plugin) and helm, built from Go modules, cached
    grove-temporal containers images     # offline base, worker image (deploy/Dockerfile), Temporal dev image
    grove-temporal containers prepare    # all of the above; exits 0 with one reason where no engine can start
    grove-temporal containers compose -- up --wait   # docker compose with the local-images override
    grove-temporal containers stop       # stop the dockerd these commands started, nothing else
"""

from __future__ import annotations

import os
import sys
import time
from typing import Annotated

import typer

containers = typer.Typer(
    name="containers", no_args_is_help=True, add_completion=False,
    help="Docker Engine, compose v2, helm and the images, without a registry (development tooling).",
)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _engine(install: bool):  # type: ignore[no-untyped-def]
    from localstack.engine import EngineUnavailableError, ensure_engine

    try:
        return ensure_engine(_log, install=install)
    except EngineUnavailableError as error:
        typer.echo(f"error: no Docker Engine: {error}", err=True)
        raise typer.Exit(1) from error


@containers.command("engine")
def engine_command(
    no_install: Annotated[bool, typer.Option(help="Never run apt-get.")] = False,
) -> None:
    """Find or start a Docker Engine and print how to reach it."""
    engine = _engine(not no_install)
    started = f", started here (pid {engine.started_pid})" if engine.started_pid else ""
    typer.echo(f"Docker Engine {engine.version} ({engine.storage_driver}){started}")
    typer.echo(f"export DOCKER_HOST={engine.host}")


@containers.command("tools")
def tools_command() -> None:
    """Provide docker compose v2 (as the `docker compose` plugin) and helm: cache, release, or Go build."""
    from localstack.binaries import BinaryUnavailableError
    from localstack.compose import install_plugin

    try:
        for installed in _tools():
            typer.echo(f"{installed.name} {installed.version}: {installed.path} ({installed.obtained}, "
                       f"{installed.seconds:.0f}s)")
        typer.echo(f"docker compose plugin: {install_plugin()}")
    except BinaryUnavailableError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error


def _tools():  # type: ignore[no-untyped-def]
    from localstack.binaries import ensure, stderr_log

    return ensure(["docker-compose", "helm"], log=stderr_log)


@containers.command("images")
def images_command(
    no_install: Annotated[bool, typer.Option(help="Never run apt-get.")] = False,
) -> None:
    """Build (or find) the offline base, the worker image and the Temporal dev-server image."""
    engine = _engine(not no_install)
    for built in _images(engine):
        typer.echo(_describe(built))


def _images(engine):  # type: ignore[no-untyped-def]
    from localstack import images

    base = images.ensure_base(engine, _log)
    return [base, images.ensure_worker_image(engine, _log, base=base),
            images.ensure_temporal_image(engine, _log, base=base)]


def _describe(built) -> str:  # type: ignore[no-untyped-def]
    took = f"built in {built.seconds:.0f}s" if built.seconds else "cached"
    return f"{built.name:<9} {built.tag}  {built.size_mb:.0f} MB  {took}  ({built.how})"


@containers.command("prepare")
def prepare_command(
    stop: Annotated[bool, typer.Option(help="Stop the engine afterwards if this command started it.")] = True,
) -> None:
    """Everything the container and chart tests need, cached: helm always; where a Docker Engine can be found or
    started, also the compose plugin and the images (else one line saying why, and exit 0)."""
    from localstack import engine as engines
    from localstack.binaries import BinaryUnavailableError, ensure, stderr_log
    from localstack.compose import install_plugin

    started = time.monotonic()
    try:
        for installed in ensure(["helm"], log=stderr_log):
            typer.echo(f"helm      {installed.version}  {installed.obtained}")
        try:
            engine = engines.ensure_engine(_log)
        except engines.EngineUnavailableError as error:
            typer.echo(f"containers: images skipped, no Docker Engine: {error}")
            return
        try:
            for installed in ensure(["docker-compose"], log=stderr_log):
                typer.echo(f"compose   {installed.version}  {installed.obtained}; plugin {install_plugin()}")
            for built in _images(engine):
                typer.echo(_describe(built))
        finally:
            if stop and engine.started_pid:
                engines.stop_started(_log)
    except BinaryUnavailableError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    typer.echo(f"containers: ready in {time.monotonic() - started:.0f}s")


@containers.command("compose", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def compose_command(ctx: typer.Context) -> None:
    """`docker compose` on docker-compose.yml plus the override that uses the local images (host network)."""
    from localstack import compose

    engine = _engine(True)
    try:
        project = compose.LocalCompose.prepare(engine, _log)
    except compose.KubeconfigMissingError as error:
        typer.echo(f"error: {error}", err=True)
        raise typer.Exit(1) from error
    os.execvpe(project.argv[0], [*project.argv, *ctx.args], {**os.environ, **project.env})


@containers.command("stop")
def stop_command() -> None:
    """Stop the dockerd that these commands started (recorded in the cache); leave any other engine alone."""
    from localstack.engine import stop_started

    if not stop_started(_log):
        typer.echo("no dockerd started by grove-temporal is running")


def register(app: typer.Typer) -> None:
    app.add_typer(containers)
