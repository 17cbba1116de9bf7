"""`grove-temporal` command line: one Typer app, each concern's commands in its own module.

Modules under worker/commands/ expose `register(app)`; they import their heavy dependencies lazily so that
`grove-temporal validate` does not pay for temporalio or the kubernetes client.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from importlib import metadata

import typer

from worker import commands

app = typer.Typer(
    name="grove-temporal",
    help="Run Grove PodCliqueSets with one durable Temporal workflow per replica.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
)


def version_text() -> str:
    """The release and the patch baseline it begins replica runs under: a release to roll back to must know the
    newest baseline in use (docs/operations.md, "Upgrading and rolling back the workers")."""
    from workflows.patches import NEWEST_INPUT_BASELINE  # here: the module imports temporalio

    try:
        release = f"grove-temporal {metadata.version('grove-temporal')}"
    except metadata.PackageNotFoundError:
        release = "grove-temporal (not installed as a package)"
    return f"{release}, replica patch baseline {NEWEST_INPUT_BASELINE}"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="print the version and exit"
    ),
) -> None:
    """Run Grove PodCliqueSets with one durable Temporal workflow per replica."""


# The development rooms (localstack/, bench/, faults/) add their commands (`run`, `binaries`, `stack-bench`,
# `bench`, `faults`) through this entry-point group; the product never imports them by name. An install without
# them (the worker image) lists the entry points but lacks the modules: those commands are simply absent there.
PLUGIN_GROUP = "grove_temporal.commands"


def _register_commands() -> None:
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)
    for entry_point in sorted(metadata.entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        try:
            register = entry_point.load()
        except ModuleNotFoundError as error:
            if error.name and entry_point.module.startswith(error.name):
                continue  # that room is not installed here
            raise
        register(app)


_register_commands()


def main() -> None:
    try:
        app()
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    if "temporalio.bridge.temporal_sdk_bridge" in sys.modules:
        # The Temporal client's Rust threads can abort CPython's finalisation of a short-lived process
        # ("PyGILState_Release: thread state must be current", temporalio/sdk-python#300). Everything the
        # command had to say is written; skip the teardown.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
