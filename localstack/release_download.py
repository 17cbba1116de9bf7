"""Download an official release binary and verify it against the sha256 its publisher states.

Machines of this project often have no internet (only the Go proxy and PyPI). Every host is probed once with a short
timeout so an offline machine falls through to the Go build within a second instead of waiting on each download.
"""

from __future__ import annotations

import hashlib
import json
import socket
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from localstack.binaries import Binary, Installed, Log, install, staging_dir

PROBE_TIMEOUT_SECONDS = 3.0
READ_TIMEOUT_SECONDS = 30.0

_unreachable: dict[str, str] = {}  # host -> why, remembered for the life of the process


class ChecksumMismatchError(RuntimeError):
    pass


def _reachable(host: str) -> str | None:
    """None when `host:443` accepts a TCP connection, else the reason."""
    if host in _unreachable:
        return _unreachable[host]
    try:
        with socket.create_connection((host, 443), timeout=PROBE_TIMEOUT_SECONDS):
            return None
    except OSError as error:
        _unreachable[host] = f"{host} unreachable ({error.strerror or error})"
        return _unreachable[host]


def _fetch(url: str, dest: Path | None = None) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "grove-temporal"})
    with urllib.request.urlopen(request, timeout=READ_TIMEOUT_SECONDS) as response:
        if dest is None:
            return bytes(response.read())
        with dest.open("wb") as f:
            while chunk := response.read(1 << 20):
                f.write(chunk)
        return b""


def _published_sha256(binary: Binary) -> str:
    asset = binary.release
    filename = asset.url.rsplit("/", 1)[-1]
    if asset.checksum_kind == "sha256-file":
        return _fetch(asset.checksum_url).decode().split()[0].strip().lower()
    if asset.checksum_kind == "sums-file":
        for line in _fetch(asset.checksum_url).decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].lstrip("*") == filename:
                return parts[0].lower()
        raise ChecksumMismatchError(f"{asset.checksum_url} lists no checksum for {filename}")
    if asset.checksum_kind == "github-digest":
        release = json.loads(_fetch(asset.checksum_url))
        for item in release.get("assets", []):
            if item.get("name") == filename and str(item.get("digest", "")).startswith("sha256:"):
                return str(item["digest"]).removeprefix("sha256:").lower()
        raise ChecksumMismatchError(f"the GitHub release {binary.version} states no sha256 for {filename}")
    raise ValueError(f"unknown checksum kind {asset.checksum_kind!r}")


def try_download(binary: Binary, root: Path, log: Log) -> Installed | None:
    """Install the official release of `binary`, or return None (after saying why) so the caller builds it."""
    asset = binary.release
    host = urlparse(asset.url).hostname or ""
    why = _reachable(host)
    if why is not None:
        log(f"{binary.name} {binary.version}: no download ({why}); will build from Go modules")
        return None
    started = time.monotonic()
    log(f"{binary.name} {binary.version}: downloading {asset.url}")
    try:
        with staging_dir(root) as stage:
            artefact = stage / asset.url.rsplit("/", 1)[-1]
            _fetch(asset.url, artefact)
            expected = _published_sha256(binary)
            actual = hashlib.sha256(artefact.read_bytes()).hexdigest()
            if actual != expected:
                raise ChecksumMismatchError(
                    f"{artefact.name}: sha256 {actual} but the publisher states {expected}"
                )
            staged = stage / binary.name
            if asset.member is None:
                artefact.rename(staged)
            else:
                with tarfile.open(artefact) as tar:
                    member = tar.extractfile(asset.member)
                    if member is None:
                        raise ChecksumMismatchError(f"{artefact.name} has no file {asset.member}")
                    staged.write_bytes(member.read())
            seconds = time.monotonic() - started
            path = install(binary, staged, f"downloaded {asset.url} (sha256 verified)", seconds, root)
    except (OSError, urllib.error.URLError, ChecksumMismatchError, tarfile.TarError, ValueError) as error:
        log(f"{binary.name} {binary.version}: download failed ({error}); will build from Go modules")
        return None
    log(f"{binary.name} {binary.version}: downloaded and verified in {seconds:.1f}s")
    return Installed(binary.name, binary.version, path, "downloaded (sha256 verified)", seconds)
