"""CLI command modules. Each exposes `register(app: typer.Typer)`; worker/cli.py discovers them."""
