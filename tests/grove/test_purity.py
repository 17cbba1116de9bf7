"""grove/ is pure: it never imports temporalio or kubernetes, directly or through anything it imports."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

GROVE = Path(__file__).resolve().parents[2] / "grove"
FORBIDDEN = ("temporalio", "kubernetes")


def _imported(path: Path) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules.add(node.module)
    return modules


def test_no_module_under_grove_imports_temporalio_or_kubernetes() -> None:
    offenders = {
        str(path.relative_to(GROVE.parent)): sorted(
            m for m in _imported(path) if m.split(".")[0] in FORBIDDEN
        )
        for path in sorted(GROVE.rglob("*.py"))
    }
    assert {path: mods for path, mods in offenders.items() if mods} == {}


def test_every_grove_module_imports_with_temporalio_and_kubernetes_blocked() -> None:
    modules = sorted(
        ".".join(path.relative_to(GROVE.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in GROVE.rglob("*.py")
    )
    script = f"""
import importlib, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {FORBIDDEN!r}:
            raise ImportError('blocked: ' + name)
        return None
sys.meta_path.insert(0, Block())
for name in {modules!r}:
    importlib.import_module(name)
print(len({modules!r}))
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=GROVE.parent)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) == len(modules) > 10
