"""The binary cache (keyed by name and version under $GROVE_TEMPORAL_BIN_DIR) and the one-sentence failure when a
binary can be neither downloaded nor built."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from localstack import binaries
from localstack.binaries import BINARIES, BinaryUnavailableError


def _fake_binary(tmp_path: Path, name: str) -> Path:
    staged = tmp_path / f"staged-{name}"
    staged.write_text("#!/bin/sh\necho fake\n")
    return staged


def test_a_cached_binary_is_used_as_it_is_and_keyed_by_name_and_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "bin"
    monkeypatch.setenv("GROVE_TEMPORAL_BIN_DIR", str(root))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no go: anything but the cache would fail
    etcd = BINARIES["etcd"]
    path = binaries.install(etcd, _fake_binary(tmp_path, "etcd"), "test fixture", 1.0)
    assert path == root / "etcd" / etcd.version / "etcd" and os.access(path, os.X_OK)

    [installed] = binaries.ensure(["etcd"], log=lambda _: None, allow_download=False)

    assert installed.path == path and installed.obtained == "cache (test fixture)"
    assert binaries.read_manifest(etcd)["sha256"] == binaries.sha256_of(path)
    assert binaries.path_of("etcd") == path


def test_a_binary_without_its_manifest_is_not_taken_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROVE_TEMPORAL_BIN_DIR", str(tmp_path / "bin"))
    etcd = BINARIES["etcd"]
    binaries.install(etcd, _fake_binary(tmp_path, "etcd"), "test fixture", 1.0)
    binaries.manifest_path(etcd).unlink()  # an interrupted install
    assert not binaries.is_cached(etcd)
    with pytest.raises(BinaryUnavailableError, match="run `grove-temporal binaries` first"):
        binaries.path_of("etcd")


def test_without_download_and_without_go_it_fails_with_one_sentence(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GROVE_TEMPORAL_BIN_DIR", str(tmp_path / "bin"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(BinaryUnavailableError) as caught:
        binaries.ensure(["kwok"], log=lambda _: None, allow_download=False)
    message = str(caught.value)
    assert message.startswith("Cannot provide kwok:") and "no `go` on PATH" in message
    assert "\n" not in message
    assert not binaries.is_cached(BINARIES["kwok"])


def test_a_raised_dependency_is_required_beside_the_module_and_keys_its_own_cache_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Temporal CLI is built with a newer SQLite driver than its release: the wrapper module requires it, the
    binary is cached apart from the release's, and the release is never downloaded in its place."""
    from localstack import release_download
    from localstack.gobuild import wrapper_go_mod

    temporal = BINARIES["temporal"]
    assert ("modernc.org/sqlite", "v1.51.0") in temporal.recipe.requires
    assert temporal.cache_key == f"{temporal.version}+modernc.org-sqlite-v1.51.0"
    assert not temporal.official_release and BINARIES["etcd"].official_release
    assert BINARIES["etcd"].cache_key == BINARIES["etcd"].version

    go_mod = wrapper_go_mod(temporal.recipe.module, temporal.version, "1.25.0", {}, temporal.recipe.requires)
    assert f"require {temporal.recipe.module} {temporal.version}\n" in go_mod
    assert "require (\n\tmodernc.org/sqlite v1.51.0\n)\n" in go_mod

    root = tmp_path / "bin"
    monkeypatch.setenv("GROVE_TEMPORAL_BIN_DIR", str(root))
    assert binaries.cached_path(temporal) == root / "temporal" / temporal.cache_key / "temporal"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no go: the build fails at once
    tried: list[str] = []
    monkeypatch.setattr(release_download, "try_download", lambda binary, *_: tried.append(binary.name))
    with pytest.raises(BinaryUnavailableError, match="Cannot provide temporal"):
        binaries.ensure(["temporal"], log=lambda _: None, allow_download=True)
    assert tried == []  # the official release lacks the fix: never downloaded instead
