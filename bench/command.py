"""`grove-temporal bench SCENARIO`: start the local stack, run one benchmark of issue 6, print and save the figures.

Scenarios (bench/): b1 gate-release latency against a measured floor, b2 termination accuracy, b3 scale,
b4 idle cost, b5 crash recovery, rollout (an image change across N replicas of 17 pods against a direct-client
floor, issue 12), scaleout (1, 2, 3 workers on one task queue, every action once, issue 17), outage (terminations
due while kube-apiserver was down, after it answers again, against a direct client's floor). The JSON goes to bench-results/<scenario>-<timestamp>.json.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

REPO = Path(__file__).resolve().parents[1]
# Which options each scenario takes (defaults live with the scenario, in bench/).
ACCEPTS = {
    "b1": {"replicas", "interval", "profile", "backends"},
    "b2": {"replicas", "delay"},
    "b3": {"sizes", "per_pcs", "profile", "pods_per_replica", "floors", "repeat"},
    "b4": {"replicas", "window", "per_pcs", "rollout_resync", "safety_resync"},
    "b5": {"replicas", "per_pcs", "profile", "workers", "after_rollout", "repeat"},
    "scale": {"replicas", "interval"},
    "rollout": {"replicas", "per_pcs"},
    "scaleout": {"replicas", "per_pcs", "worker_counts", "delay"},
    "outage": {"replicas", "delay", "down"},
}
EVERY_SCENARIO = {"timeout"}  # how long one phase may wait before the run is abandoned


def _distinct(value: str | None, allowed: tuple[str, ...], what: str, option: str, *,
              may_be_empty: bool = False) -> tuple[str, ...] | None:
    """A comma-separated list of distinct names out of `allowed`; anything else is refused naming `option`."""
    if value is None:
        return None
    chosen = tuple(c.strip() for c in value.split(",") if c.strip())
    if (not chosen and not may_be_empty) or any(c not in allowed for c in chosen) or len(set(chosen)) != len(chosen):
        raise typer.BadParameter(f"{value!r}: a comma-separated list of distinct {what} out of {', '.join(allowed)}",
                                 param_hint=f"'{option}'")
    return chosen


def _backends(value: str | None) -> tuple[str, ...] | None:
    from grove import names

    return _distinct(value, names.BACKEND_VALUES, "backends", "--backends")


def _floors(value: str | None) -> tuple[str, ...] | None:
    from bench.b3_scale import FLOORS

    # empty: the product alone
    return _distinct(value, FLOORS, "floors", "--floors", may_be_empty=True)


def _worker_counts(value: str | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    try:
        counts = tuple(int(c) for c in value.split(","))
    except ValueError:
        counts = ()
    if not counts or any(not 1 <= c <= 8 for c in counts):
        raise typer.BadParameter(f"{value!r}: a comma-separated list of worker counts from 1 to 8",
                                 param_hint="'--worker-counts'")
    return counts


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)


def bench(
    scenario: Annotated[str, typer.Argument(help="b1 release latency, b2 termination accuracy, b3 scale, "
                                                 "b4 idle cost, b5 recovery, scale: PCSG scale write → "
                                                 "gates released, rollout: image change, scaleout: 1-3 "
                                                 "workers, no duplicate action, outage: terminations due "
                                                 "while kube-apiserver was down")],
    replicas: Annotated[int | None, typer.Option(help="b1: PCSs created (default 20); scale: scale writes (20); "
                                                     "b2: breaches (20); scaleout: replicas (300); "
                                                     "b4: settled replicas (200); b5: active replicas (100); "
                                                     "rollout: PCS replicas of 17 pods (100); outage: breached "
                                                     "replicas (10)")] = None,
    interval: Annotated[float | None, typer.Option(help="b1: seconds between PCS creations, scale: between "
                                                       "scale writes (1.5)")] = None,
    delay: Annotated[float | None, typer.Option(help="b2, scaleout, outage: terminationDelay in seconds (5)")] = None,
    down: Annotated[float | None, typer.Option(min=0, help="outage: seconds kube-apiserver stays down after the "
                                                           "last deadline (18)")] = None,
    sizes: Annotated[str | None, typer.Option(help="b3: comma-separated replica counts (200,500,1000)")] = None,
    window: Annotated[float | None, typer.Option(help="b4: seconds of each idle window (300)")] = None,
    rollout_resync: Annotated[float | None, typer.Option(min=1, help="b4: the worker's --rollout-resync-seconds "
                                                                     "(600, its default)")] = None,
    safety_resync: Annotated[float | None, typer.Option(min=1, help="b4: the worker's --replica-resync-seconds, so "
                                                                    "that the replicas' safety rounds come within "
                                                                    "the run (900; the worker's default is 6 h)")] = None,
    per_pcs: Annotated[int | None, typer.Option(help="b3-b5, rollout, scaleout: replicas per PodCliqueSet "
                                                          "(10)")] = None,
    profile: Annotated[bool, typer.Option(help="b1, b3, b5: py-spy the worker while measuring (top frames in the "
                                               "JSON)")] = False,
    backends: Annotated[str | None, typer.Option(help="b1: comma-separated gang scheduler backends measured one "
                                                      "after the other on one stack, each beside its floor "
                                                      "(e.g. kube,none); default: the worker's "
                                                      "($GROVE_TEMPORAL_SCHEDULER_BACKEND)")] = None,
    workers: Annotated[int | None, typer.Option(min=1, max=2, help="b5: 1 (kill the worker, start it again) or 2 "
                                                                  "(kill the leading one of two)")] = None,
    after_rollout: Annotated[bool, typer.Option(help="b5: roll every PodCliqueSet to a new image before the kill, "
                                                     "so the worker replays runs that hold a rolling update")] = False,
    pods_per_replica: Annotated[int | None, typer.Option(help="b3: 1 (one clique of one pod) or 17 (the replicas "
                                                             "of bench rollout: frontend, decode, 2 PCSG replicas)")] = None,
    worker_counts: Annotated[str | None, typer.Option(help="scaleout: comma-separated worker counts, each on a "
                                                           "fresh stack (1,2,3)")] = None,
    floors: Annotated[str | None, typer.Option(help="b3: comma-separated floors measured beside the product, each on "
                                                    "a fresh stack: direct, temporal, local (all three)")] = None,
    repeat: Annotated[int | None, typer.Option(min=1, help="b3: run the product phase this many times per size; "
                                                          "b5: the whole run (kill, floor, restarts); each on a "
                                                          "fresh stack, the median run reported with every run "
                                                          "beside it (1)")] = None,
    timeout: Annotated[float | None, typer.Option(min=1, help="seconds one phase may wait before the run is "
                                                             "abandoned (b1, b2, scale: 300; b5, scaleout: 900; "
                                                             "b4: 1200; b3, rollout: 1800)")] = None,
    out: Annotated[Path, typer.Option(help="directory for the JSON result")] = REPO / "bench-results",
) -> None:
    """Run one benchmark scenario on a fresh local stack; print a table and write JSON."""
    import asyncio

    from bench import interrupt, report
    from bench.runner import run_scenario

    if scenario not in ACCEPTS:
        raise typer.BadParameter(f"unknown scenario {scenario!r}; one of {', '.join(ACCEPTS)}")
    given: dict[str, Any] = {"replicas": replicas, "interval": interval, "delay": delay, "down": down,
                             "window": window,
                             "rollout_resync": rollout_resync, "safety_resync": safety_resync,
                             "per_pcs": per_pcs, "workers": workers,
                             "worker_counts": _worker_counts(worker_counts), "pods_per_replica": pods_per_replica,
                             "profile": profile or None, "after_rollout": after_rollout or None,
                             "sizes": tuple(int(s) for s in sizes.split(",")) if sizes else None,
                             "backends": _backends(backends), "floors": _floors(floors), "timeout": timeout,
                             "repeat": repeat}
    if pods_per_replica is not None and pods_per_replica not in (1, 17):
        raise typer.BadParameter(f"{pods_per_replica}: 1 or 17", param_hint="'--pods-per-replica'")
    given = {k: v for k, v in given.items() if v is not None}
    wrong = sorted(set(given) - ACCEPTS[scenario] - EVERY_SCENARIO)
    if wrong:
        raise typer.BadParameter(f"{scenario} does not take {', '.join('--' + w.replace('_', '-') for w in wrong)}")
    async def measured() -> dict[str, Any]:
        task = asyncio.current_task()
        assert task is not None
        interrupt.on_signals(task)
        return await run_scenario(scenario, given)

    try:
        result = asyncio.run(measured())
    except (asyncio.CancelledError, interrupt.Interrupted) as stopped:
        if not interrupt.STOP.is_set():
            raise
        typer.echo("bench: stopped before it finished; nothing written, the stack is down", err=True)
        raise typer.Exit(130) from stopped
    except report.Unfinished as late:  # the figures measured until then, marked timed_out
        report.render(late.results)
        path = report.write(late.results, out)
        typer.echo(f"bench: {late}; wrote what was measured until then to {path}, the stack is down "
                   "(a longer --timeout lets it finish)", err=True)
        raise typer.Exit(1) from late
    except TimeoutError as late:
        typer.echo(f"bench: {late}; nothing written, the stack is down (a longer --timeout lets it finish)", err=True)
        raise typer.Exit(1) from late
    report.render(result)
    path = report.write(result, out)
    typer.echo(f"wrote {path}")
