"""TEMPORAL_TLS (worker/config.py): unset leaves the choice to the SDK (TLS with an API key); a value it cannot read
stops the worker in one line instead of being taken as off."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from worker.cli import app
from worker.config import TemporalSettings


@pytest.mark.parametrize("value, tls", [(None, None), ("", None), ("true", True), ("ON", True), ("0", False),
                                        ("no", False)])
def test_tls_is_on_off_or_left_to_the_sdk(monkeypatch: pytest.MonkeyPatch, value: str | None,
                                          tls: bool | None) -> None:
    if value is None:
        monkeypatch.delenv("TEMPORAL_TLS", raising=False)
    else:
        monkeypatch.setenv("TEMPORAL_TLS", value)
    assert TemporalSettings().tls is tls


def test_a_misspelt_tls_switch_is_refused_in_one_line_naming_the_variable() -> None:
    result = CliRunner(env={"TEMPORAL_TLS": "yes please"}).invoke(app, ["worker"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == "error: TEMPORAL_TLS must be 1/true/yes/on or 0/false/no/off, got 'yes please'"
