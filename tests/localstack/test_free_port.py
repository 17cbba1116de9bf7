"""Ports for the local stack's components come from below the kernel's ephemeral range, where no outgoing connection
can be given them between the pick and the component's own bind."""

from __future__ import annotations

import socket
from pathlib import Path

from localstack import readiness


def test_ports_are_picked_below_the_ephemeral_range_bindable_and_never_twice() -> None:
    low, _ = readiness.ephemeral_range()
    ports = [readiness.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    for port in ports:
        assert readiness.LOW_PORT <= port < low if low - readiness.LOW_PORT >= 1000 else port > 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((readiness.LOOPBACK, port))  # free when handed out


def test_the_ephemeral_range_falls_back_to_linux_defaults_when_unreadable(tmp_path: Path) -> None:
    written = tmp_path / "range"
    written.write_text("40000\t50000\n")
    assert readiness.ephemeral_range(written) == (40000, 50000)
    assert readiness.ephemeral_range(tmp_path / "missing") == (32768, 60999)
    (tmp_path / "bad").write_text("many\n")
    assert readiness.ephemeral_range(tmp_path / "bad") == (32768, 60999)
