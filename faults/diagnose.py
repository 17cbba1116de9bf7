"""What the fault runner prints when a round does not converge: enough to tell afterwards whether the product or the
stack (a scheduler that lost its watches, a node gone) held it up, without the run directory's logs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

JSON = dict[str, Any]
SHOWN = 12  # pods per unsettled round: the first few tell the story


def _condition(pod: JSON, kind: str) -> JSON | None:
    return next((c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def unready_pod_lines(pods: list[JSON], now: datetime | None = None) -> list[str]:
    """One line per pod that is not Ready: phase, node, gates, why it is not scheduled or not Ready, its age."""
    now = now or datetime.now(UTC)
    lines: list[str] = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        ready = _condition(pod, "Ready")
        if ready is not None and ready.get("status") == "True":
            continue
        meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
        parts = [f"phase {status.get('phase', '?')}", f"node {spec.get('nodeName') or '-'}"]
        gates = [g["name"] for g in spec.get("schedulingGates") or []]
        if gates:
            parts.append(f"gates {','.join(gates)}")
        scheduled = _condition(pod, "PodScheduled")
        if scheduled is not None and scheduled.get("status") != "True":
            parts.append(f"unscheduled: {scheduled.get('reason', '')} {(scheduled.get('message') or '')[:120]}")
        if ready is not None and ready.get("reason"):
            parts.append(f"not Ready: {ready['reason']}")
        if meta.get("deletionTimestamp"):
            parts.append(f"deleting since {meta['deletionTimestamp']}")
        created = meta.get("creationTimestamp")
        if created:
            age = now - datetime.fromisoformat(created.replace("Z", "+00:00"))
            parts.append(f"age {age.total_seconds():.0f}s")
        lines.append(f"pod {meta['name']}: {', '.join(parts)}")
    if len(lines) > SHOWN:
        lines = [*lines[:SHOWN], f"... and {len(lines) - SHOWN} more pods not Ready"]
    return lines or ["every pod is Ready"]
