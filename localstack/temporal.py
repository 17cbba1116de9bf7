"""The Temporal dev server (`temporal server start-dev`): frontend, history, matching, SQLite and the Web UI.

Usable alone (a second server for one test, `TemporalDevServer(...).start()`), and restartable on the same port
and database file, which is how fault tests play a Temporal outage.
"""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from localstack.processes import ManagedProcess, ProcessRegistry
from localstack.readiness import LOOPBACK, free_port, http_status, port_accepts, wait_until
from workflows.contract import SEARCH_ATTRIBUTES  # registered at start so workflows can upsert them at once


class TemporalDevServer:
    def __init__(
        self,
        binary: Path,
        run_dir: Path,
        registry: ProcessRegistry,
        *,
        name: str = "temporal",
        db_file: Path | None = None,
        dynamic_config: dict[str, object] | None = None,
        namespaces: tuple[str, ...] = (),
        headless: bool = False,
    ) -> None:
        self.name = name
        self.dir = run_dir / name
        self.db_file = db_file
        self.headless = headless
        # Fixed for the life of this object: a restart comes back on the same address, as clients expect.
        self.port = free_port()
        self.ui_port = free_port()
        self.http_port = free_port()
        self.metrics_port = free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.ui_url = f"http://{LOOPBACK}:{self.ui_port}"
        argv = [
            str(binary),
            "server",
            "start-dev",
            f"--ip={LOOPBACK}",
            f"--port={self.port}",
            f"--ui-port={self.ui_port}",
            f"--http-port={self.http_port}",
            f"--metrics-port={self.metrics_port}",
            "--log-level=warn",
            # Our own (empty) CLI environment file: the user's ~/.config/temporalio must not leak in, and the
            # run directory in the command line lets stale-run cleanup recognise this process.
            f"--env-file={self.dir / 'cli-env.yaml'}",
        ]
        argv += [f"--search-attribute={k}={v}" for k, v in SEARCH_ATTRIBUTES.items()]
        argv += [f"--dynamic-config-value={k}={json.dumps(v)}" for k, v in (dynamic_config or {}).items()]
        argv += [f"--namespace={ns}" for ns in namespaces]
        if db_file is not None:
            argv.append(f"--db-filename={db_file}")
        if headless:
            argv.append("--headless")
        self.process = ManagedProcess(
            name, argv, run_dir / "logs" / f"{name}.log", registry, env={"HOME": str(self.dir)}
        )

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "cli-env.yaml").touch()
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        self.process.start()

    def _search_attributes_registered(self) -> bool:
        # The HTTP API answers only once the frontend serves the default namespace; the dev server registers the
        # search attributes just after that, so wait for them too or the first upsert can fail.
        url = f"http://{LOOPBACK}:{self.http_port}/api/v1/namespaces/default/search-attributes"
        with urllib.request.urlopen(url, timeout=2) as response:
            body = json.loads(response.read())
        custom = body.get("customAttributes") or {}
        return all(k in custom for k in SEARCH_ATTRIBUTES)

    def ready(self) -> bool:
        if not port_accepts(self.port) or not self._search_attributes_registered():
            return False
        return self.headless or http_status(self.ui_url) == 200

    def wait_ready(self, timeout: float = 60.0) -> float:
        return wait_until(self.ready, f"{self.name} (Temporal dev server)", timeout, self.process)

    def stop(self, grace: float = 10.0) -> None:
        self.process.stop(grace)

    def kill(self) -> None:
        self.process.kill()

    def restart(self, timeout: float = 60.0) -> float:
        """Stop and start again on the same ports (and DB file, if any); returns seconds until ready."""
        self.stop()
        self.start()
        return self.wait_ready(timeout)
