"""The rooms of the repository (DESIGN §6): the product (grove, workflows, activities, worker) never imports a
development room (localstack, bench, faults), and no two top-level packages import each other, directly or round
a longer cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("grove", "workflows", "activities", "worker")
DEV_ROOMS = ("localstack", "bench", "faults")
ROOMS = PRODUCT + DEV_ROOMS


def _imports_between_rooms() -> dict[str, dict[str, set[str]]]:
    """room -> imported room -> the files that import it."""
    graph: dict[str, dict[str, set[str]]] = {room: {} for room in ROOMS}
    for room in ROOMS:
        for path in sorted((ROOT / room).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                    names = [node.module]
                for name in names:
                    top = name.split(".")[0]
                    if top in ROOMS and top != room:
                        graph[room].setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return graph


def test_the_product_never_imports_a_development_room() -> None:
    graph = _imports_between_rooms()
    offenders = {
        room: {dev: sorted(files) for dev, files in graph[room].items() if dev in DEV_ROOMS} for room in PRODUCT
    }
    assert {room: found for room, found in offenders.items() if found} == {}


def test_no_import_cycle_between_top_level_packages() -> None:
    graph = _imports_between_rooms()
    try:
        order = list(TopologicalSorter({room: set(deps) for room, deps in graph.items()}).static_order())
    except CycleError as error:
        raise AssertionError(f"import cycle between rooms: {error.args[1]}") from error
    assert order.index("grove") < order.index("workflows") < order.index("activities") < order.index("worker")


def test_the_development_rooms_reach_the_cli_through_entry_points_only() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    for target in ("localstack.commands:register", "bench.command:register", "faults.command:register"):
        assert target in pyproject
    cli = (ROOT / "worker" / "cli.py").read_text()
    assert all(room not in cli.split("PLUGIN_GROUP")[0] for room in ("import localstack", "import bench"))


# Renamed so that no two modules share a name a reader would confuse (issue 18): they must not come back.
RENAMED = {
    "activities/view.py": "activities/observe.py",
    "workflows/views.py": "workflows/presentation.py",
    "worker/ops.py": "worker/replica_client.py",
}


def test_renamed_modules_do_not_reappear() -> None:
    assert [old for old in RENAMED if (ROOT / old).exists()] == []
    assert [new for new in RENAMED.values() if not (ROOT / new).exists()] == []
    old_modules = {old.removesuffix(".py").replace("/", ".") for old in RENAMED}
    importers = sorted(
        f"{path.relative_to(ROOT)} imports {name}"
        for room in ROOMS + ("tests",)
        for path in (ROOT / room).rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
        for name in ([node.module] + [f"{node.module}.{a.name}" for a in node.names])
        if name in old_modules
    )
    assert importers == []


@pytest.mark.parametrize("room", ["workflows", "grove"])
@pytest.mark.parametrize("call", [
    "from datetime import datetime\n\nprint(datetime.now())\n",
    "import time\n\nprint(time.time())\n",
    "import random\n\nprint(random.random())\n",
    "import uuid\n\nprint(uuid.uuid4())\n",
    "from kubernetes import client\n\nprint(client)\n",
])
def test_ruff_refuses_nondeterministic_calls_in_code_that_runs_in_workflows(room: str, call: str) -> None:
    """Workflows run unsandboxed by default (worker/config.py: workflow_sandbox), so the nested ruff configs of
    workflows/ and grove/ are what refuses these before a replay would; elsewhere the same code passes."""
    def check(path: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--stdin-filename", path, "-"],
                              input=call, capture_output=True, text=True, cwd=ROOT)

    inside = check(f"{room}/probe.py")
    assert inside.returncode == 1 and "TID251" in inside.stdout, inside.stdout + inside.stderr
    outside = check("activities/probe.py")
    assert outside.returncode == 0, outside.stdout + outside.stderr
