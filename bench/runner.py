"""Run one scenario: stack(s) up, measure, envelope the figures with machine, versions, commit and command."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bench import env, report
from bench.cluster import Clusters

if TYPE_CHECKING:
    from localstack.stack import LocalStack

Scenario = Callable[..., Awaitable[dict[str, Any]]]


def scenarios() -> dict[str, Scenario]:
    from bench import (
        b1_release,
        b2_termination,
        b3_scale,
        b4_idle,
        b5_recovery,
        bscale,
        outage,
        rollout,
        scaleout,
    )

    return {"b1": b1_release.run, "b2": b2_termination.run, "b3": b3_scale.run, "b4": b4_idle.run,
            "b5": b5_recovery.run, "scale": bscale.run, "rollout": rollout.run, "scaleout": scaleout.run,
            "outage": outage.run}


async def run_scenario(name: str, options: dict[str, Any], *, stack: LocalStack | None = None) -> dict[str, Any]:
    started = time.time()
    machine = env.machine()
    clusters = Clusters(stack)
    try:
        results = await scenarios()[name](clusters, **options)
    except report.Unfinished as late:  # what it measured, enveloped like a finished run's, to be written
        raise report.Unfinished(str(late), _enveloped(name, options, {**late.results, "timed_out": str(late)},
                                                      clusters, started, machine)) from late
    return _enveloped(name, options, results, clusters, started, machine)


def _enveloped(name: str, options: dict[str, Any], results: dict[str, Any], clusters: Clusters, started: float,
               machine: dict[str, Any]) -> dict[str, Any]:
    notes = list(results.pop("notes", []))
    return report.envelope(name, options, results, kube_version=clusters.kube_version, started=started,
                           machine=machine, notes=notes)
