"""The README and docs/ stand on their own: they cite no document a reader of the repository does not have (design
notes, seed documents, issue numbers, paths on a developer's machine), and every relative link points at a file of
the repository (and, for a Markdown file, at a heading it has)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FORBIDDEN = [
    (re.compile(r"DESIGN(\.md)?\b"), "a design document outside the repository"),
    (re.compile("\u00a7"), "a section sign (a section of a document outside the repository)"),
    (re.compile(r"\bseeds?[ -]?0\d\d\b", re.IGNORECASE), "a seed document"),
    (re.compile(r"\bissues? #?\d+", re.IGNORECASE), "an issue number"),
    (re.compile(r"(?<![\w.])/(work|home)/"), "a path on a developer's machine"),
]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
CODE_BLOCK = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def references(text: str) -> list[str]:
    """Every forbidden reference in `text`, as 'line N: what (the match)'."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, what in FORBIDDEN:
            for match in pattern.finditer(line):
                found.append(f"line {number}: {what} ({match.group(0)!r})")
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped except '-' and '_', spaces to '-'."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = CODE_BLOCK.sub("", path.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.MULTILINE)}


def broken_links(path: Path) -> list[str]:
    """Relative links of a Markdown file whose file (or heading) does not exist in the repository."""
    broken = []
    text = CODE_BLOCK.sub("", path.read_text())
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if ROOT not in resolved.parents and resolved != ROOT:
            broken.append(f"{target}: outside the repository")
        elif not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {resolved.relative_to(ROOT)}")
    return broken


def test_docs_exist() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "semantics.md", "architecture.md", "operations.md", "benchmarks.md", "fault-runs.md",
            "limitations.md"} <= names
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")
    assert "## [Unreleased]" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_references_outside_the_repository(path: Path) -> None:
    assert references(path.read_text()) == []


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    assert broken_links(path) == []


def test_the_checks_catch_what_they_are_for(tmp_path: Path) -> None:
    text = "As DESIGN \u00a74.2 says (seed 002, issue 16), see /work/notes/16.md."
    assert len(references(text)) == 5
    assert references("a --seed 1 run, seeded rounds, the seeds of replica counts") == []
    page = ROOT / "docs" / "_probe_for_test.md"
    page.write_text("[a](../README.md#what-it-is) [b](missing.md) [c](../README.md#no-such-heading) "
                    "[d](../../outside.md) [e](https://github.com/ai-dynamo/grove)\n")
    try:
        assert [b.split(":")[0] for b in broken_links(page)] == [
            "missing.md", "../README.md#no-such-heading", "../../outside.md"]
    finally:
        page.unlink()
