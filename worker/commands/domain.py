"""`validate`, `plan` and `podgroup`: the pure domain commands (no Temporal, no cluster).

Exit codes: 0 success, 1 invalid input (bad YAML, invalid manifest), 2 usage error (missing file, bad option).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from rich.console import Console
from rich.table import Table

from grove import names
from grove.durations import format_duration
from grove.gangtree import kai_podgroup, non_preemptible_pods, tree_for, tree_from_podgroup
from grove.models import PodCliqueSet
from grove.plan import ReplicaPlan, plan_document, plan_replica
from grove.problems import Problem
from grove.validation import check_document, parse_pcs, parse_podgroup, validate_pcs

FileOption = Annotated[
    str, typer.Option("-f", "--file", help="YAML file with one or more documents; '-' reads standard input")
]


class OutputFormat(StrEnum):
    json = "json"
    yaml = "yaml"
    table = "table"


@dataclass(frozen=True)
class Document:
    number: int  # 1-based, counting non-empty documents
    line: int  # 1-based line where the document starts
    data: Any

    def label(self) -> str:
        if isinstance(self.data, dict):
            kind, name = self.data.get("kind"), (self.data.get("metadata") or {}).get("name")
            if isinstance(kind, str) and isinstance(name, str):
                return f"{kind}/{name}"
        return f"document {self.number} (line {self.line})"


class InputError(Exception):
    """Unreadable input: exit 1 with this message."""


def _read(path: str) -> tuple[str, str]:
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    file = Path(path)
    if not file.exists():
        raise typer.BadParameter(f"file not found: {path}", param_hint="'-f' / '--file'")
    if not file.is_file():
        raise typer.BadParameter(f"not a file: {path}", param_hint="'-f' / '--file'")
    try:
        return file.read_text(encoding="utf-8"), path
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{path}: cannot read: {error}") from None


def load_documents(path: str) -> list[Document]:
    """The non-empty YAML documents of a file, with the line each starts on."""
    text, source = _read(path)
    loader = yaml.SafeLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            data = loader.construct_document(node)
            if data is not None:
                documents.append(Document(len(documents) + 1, node.start_mark.line + 1, data))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = getattr(error, "problem", None) or str(error)
        raise InputError(f"{where}: invalid YAML: {problem}") from None
    finally:
        loader.dispose()
    if not documents:
        raise InputError(f"{source}: no YAML documents found")
    return documents


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def validate(
    file: FileOption,
    strict: Annotated[bool, typer.Option("--strict", help="unknown fields are errors, not warnings")] = False,
    output: Annotated[
        str, typer.Option("--output", "-o", help="text (field.path: message lines), json or yaml")
    ] = "text",
) -> None:
    """Check PodCliqueSet and KAI PodGroup documents; print every problem as `field.path: message`.

    Unknown fields (a misspelled `minAvalable`) are warnings: Grove fields grove-temporal does not model are kept
    as they are. With --strict they are errors (exit 1)."""
    try:
        documents = load_documents(file)
    except InputError as error:
        raise _fail(str(error)) from None
    if output not in ("text", "json", "yaml"):
        raise typer.BadParameter(f"must be 'text', 'json' or 'yaml', not {output!r}", param_hint="'--output'")
    several = len(documents) > 1
    invalid = False
    report = []
    for document in documents:
        problems, warnings = check_document(document.data)
        if strict:
            problems = problems + [Problem(w.path, "unknown field") for w in warnings]
            warnings = []
        invalid = invalid or bool(problems)
        if output != "text":
            report.append({"document": document.label(), "line": document.line, "valid": not problems,
                           "problems": [{"field": p.path, "message": p.message} for p in problems],
                           "warnings": [{"field": w.path, "message": w.message} for w in warnings]})
            continue
        prefix = f"{document.label()}: " if several else ""
        for problem in problems:
            typer.echo(f"{prefix}{problem}")
        for warning in warnings:
            typer.echo(f"{prefix}warning: {warning}")
        if not problems:
            typer.echo(f"{document.label()}: valid{_gang_cost(document.data)}")
    if output != "text":
        from worker.output import render as as_text

        typer.echo(as_text(report, output).rstrip("\n"))
    if invalid:
        raise typer.Exit(1)


def _gang_cost(data: Any) -> str:
    """For a valid document: the fewest pods that satisfy its gang (DESIGN §5), which a scheduler must not preempt."""
    if data.get("kind") == names.KIND_KAI_PODGROUP:
        podgroup, _ = parse_podgroup(data)
        if podgroup is None:
            return ""
        return f"; gang satisfied by {non_preemptible_pods(tree_from_podgroup(podgroup))} non-preemptible pods"
    pcs, _ = parse_pcs(data)
    if pcs is None:
        return ""
    per_replica = non_preemptible_pods(tree_for(plan_replica(pcs, 0)))
    return f"; each replica's gang satisfied by {per_replica} non-preemptible pods"


def _load_pcs(file: str) -> PodCliqueSet:
    """The one valid PodCliqueSet of a file; exits 1 with its problems otherwise."""
    try:
        documents = load_documents(file)
    except InputError as error:
        raise _fail(str(error)) from None
    candidates = [
        d for d in documents if isinstance(d.data, dict) and d.data.get("kind") == names.KIND_PODCLIQUESET
    ]
    if len(candidates) != 1:
        found = "no PodCliqueSet" if not candidates else f"{len(candidates)} PodCliqueSets"
        raise _fail(f"{file}: expected exactly one PodCliqueSet document, found {found}")
    problems: list[Problem] = validate_pcs(candidates[0].data)
    pcs, _ = parse_pcs(candidates[0].data)
    if problems or pcs is None:
        for problem in problems:
            typer.echo(str(problem), err=True)
        raise _fail(f"{candidates[0].label()}: invalid; nothing planned")
    return pcs


def _check_replica(pcs: PodCliqueSet, replica: int) -> None:
    if not 0 <= replica < pcs.spec.replicas:
        have = pcs.spec.replicas
        span = f" (0-{have - 1})" if have else ""
        raise typer.BadParameter(
            f"{replica} is out of range: {pcs.name} has {have} replicas{span}", param_hint="'--replica'"
        )


def plan(
    file: FileOption,
    replica: Annotated[int | None, typer.Option("--replica", help="plan only this PCS replica index")] = None,
    output: Annotated[
        OutputFormat, typer.Option("-o", "--output", help="json, yaml or table")
    ] = OutputFormat.table,
) -> None:
    """Show what a PodCliqueSet will create: PodCliques, scaling groups, base and scaled PodGangs."""
    pcs = _load_pcs(file)
    if replica is not None:
        _check_replica(pcs, replica)
    indices = None if replica is None else [replica]
    if output is OutputFormat.json:
        typer.echo(json.dumps(plan_document(pcs, indices), indent=2))
    elif output is OutputFormat.yaml:
        typer.echo(yaml.safe_dump(plan_document(pcs, indices), sort_keys=False), nl=False)
    else:
        chosen = range(pcs.spec.replicas) if indices is None else indices
        _print_tables([plan_replica(pcs, index) for index in chosen], pcs)


def _print_tables(plans: list[ReplicaPlan], pcs: PodCliqueSet) -> None:
    console = Console(soft_wrap=True)
    if not plans:
        console.print(f"{pcs.name}: spec.replicas is 0; nothing to create")
    for replica in plans:
        console.print(
            f"[bold]{replica.pcs}[/bold] replica {replica.replica} in namespace {replica.namespace} "
            f"(headless Service {replica.service.name}; scaled gangs released after base gang is "
            f"{replica.scaled_release_after})"
        )
        if replica.scaling_groups:
            groups = Table("PodCliqueScalingGroup", "Replicas", "MinAvailable", "TerminationDelay")
            for group in replica.scaling_groups:
                delay = replica.effective_delay(group.name)
                shown = format_duration(delay) if delay is not None else "-"
                groups.add_row(group.name, str(group.replicas), str(group.min_available), shown)
            console.print(groups)
        cliques = Table("PodClique", "Clique", "Replicas", "MinAvailable", "PodGang", "Gang", "ScalingGroup")
        for pclq in replica.pod_cliques:
            ref = pclq.scaling_group
            cliques.add_row(
                pclq.name,
                pclq.clique,
                str(pclq.replicas),
                str(pclq.min_available),
                pclq.pod_gang,
                "base" if pclq.base else "scaled",
                f"{ref.name} [{ref.replica_index}]" if ref else "-",
            )
        console.print(cliques)
        gangs = Table("PodGang", "Gang", "PodGroup (minReplicas)")
        for gang in replica.pod_gangs:
            members = "\n".join(f"{group.name} ({group.min_replicas})" for group in gang.pod_groups)
            gangs.add_row(gang.name, "base" if gang.base else "scaled", members)
        console.print(gangs)


def podgroup(
    file: FileOption,
    replica: Annotated[int, typer.Option("--replica", help="PCS replica index")],
    elastic: Annotated[
        bool, typer.Option("--elastic", help="emit minSubGroup = minAvailable on scaling groups (seed 001)")
    ] = False,
    queue: Annotated[str | None, typer.Option("--queue", help="KAI queue (spec.queue)")] = None,
    preemptibility: Annotated[
        str | None, typer.Option("--preemptibility", help="spec.preemptibility")
    ] = None,
    output: Annotated[str, typer.Option("--output", "-o", help="yaml or json")] = "yaml",
) -> None:
    """Print the KAI scheduling.run.ai/v2alpha2 PodGroup of one PodCliqueSet replica."""
    if output not in ("yaml", "json"):
        raise typer.BadParameter(f"must be 'yaml' or 'json', not {output!r}", param_hint="'--output'")
    pcs = _load_pcs(file)
    _check_replica(pcs, replica)
    exported = kai_podgroup(
        plan_replica(pcs, replica),
        elastic=elastic,
        queue=queue,
        priority_class_name=pcs.spec.template.priority_class_name,
        preemptibility=preemptibility,
    )
    if output == "json":
        typer.echo(json.dumps(exported.to_wire(), indent=2))
    else:
        typer.echo(yaml.safe_dump(exported.to_wire(), sort_keys=False), nl=False)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("plan")(plan)
    app.command("podgroup")(podgroup)
