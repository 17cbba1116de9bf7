"""`grove-temporal` command line: one Typer app, each concern's commands in its own module.

Modules under worker/commands/ expose `register(app)`; they import their heavy dependencies lazily so that
`grove-temporal validate` does not pay for temporalio or the kubernetes client.
"""

from __future__ import annotations

import importlib
import pkgutil

import typer

from worker import commands

app = typer.Typer(
    name="grove-temporal",
    help="Run Grove PodCliqueSets with one durable Temporal workflow per replica.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
