"""`grove-temporal faults --seed N --rounds K`: a seeded fault run on a fresh local stack (issue 7).

Prints the counts (faults injected by kind, terminations checked, invariant violations) and writes them as JSON to
fault-results/; while it runs, the results so far after every round (`faults-seed<N>-r<K>-progress.json`). Exit code 0 when no invariant was violated, 1 otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

REPO = Path(__file__).resolve().parents[1]


def register(app: typer.Typer) -> None:
    app.command("faults")(faults)


def faults(
    seed: Annotated[int, typer.Option(help="seed of random.Random: the same seed plays the same rounds")] = 1,
    rounds: Annotated[int, typer.Option(min=1, help="rounds of faults")] = 10,
    replicas: Annotated[int, typer.Option(min=1, max=4, help="spec.replicas of every PodCliqueSet")] = 2,
    round_seconds: Annotated[float, typer.Option(min=5, help="window of each round's faults and readiness changes "
                                                             "(then the quiet period)")] = 20.0,
    max_apiserver_outage: Annotated[float, typer.Option(min=1, max=30, help="longest kube-apiserver outage, "
                                                                            "seconds")] = 30.0,
    max_temporal_down: Annotated[float, typer.Option(min=0, help="longest Temporal dev server outage in a restart "
                                                                 "(on top of its start-up), seconds")] = 15.0,
    settle_timeout: Annotated[float, typer.Option(min=30, help="longest quiet period before a round counts as "
                                                               "not converged")] = 180.0,
    template_change_probability: Annotated[float, typer.Option(min=0, max=1, help="chance that a round also changes "
                                                                      "one PCS's image or env var (a rolling "
                                                                      "update under the faults)")] = 0.3,
    fault_kinds: Annotated[str, typer.Option(help="comma-separated fault kinds the rounds cycle through; "
                                                  "default: node-loss, worker-kill, temporal-restart, "
                                                  "apiserver-outage; also: etcd-restart, partition-apiserver, "
                                                  "partition-temporal (root, iptables, cgroup2)")] = "",
    workers: Annotated[int, typer.Option(min=1, max=3, help="worker processes on the task queue (the watcher is "
                                                            "leader-elected among them); a worker kill hits one")] = 1,
    worker_clock_skew: Annotated[float, typer.Option(min=-3600, max=3600, help="the last worker's wall clock runs "
                                                                            "this many seconds off (0: none)")] = 0.0,
    out: Annotated[Path, typer.Option(help="directory for the JSON result")] = REPO / "fault-results",
) -> None:
    """Inject seeded faults into a running workload and check that no termination came early, twice or not at all."""
    from faults import runner, schedule

    kinds = tuple(k.strip() for k in fault_kinds.split(",") if k.strip()) or schedule.FAULT_KINDS
    unknown = [k for k in kinds if k not in schedule.ALL_FAULT_KINDS]
    if unknown:
        raise typer.BadParameter(f"unknown fault kind(s) {', '.join(unknown)}; known: "
                                 f"{', '.join(schedule.ALL_FAULT_KINDS)}", param_hint="--fault-kinds")
    settings = schedule.Settings(round_seconds=round_seconds, fault_kinds=kinds,
                                 apiserver_down_seconds=(min(5.0, max_apiserver_outage), max_apiserver_outage),
                                 temporal_down_seconds=(0.0, max_temporal_down),
                                 template_change_probability=template_change_probability, workers=workers,
                                 worker_clock_skew_seconds=worker_clock_skew)
    options = runner.Options(seed=seed, rounds=rounds, replicas=replicas, settings=settings,
                             settle_timeout=settle_timeout, out_dir=out, log=lambda line: typer.echo(line, err=True))
    try:
        results = runner.run(options)
    except runner.PartitionsUnavailable as err:
        raise typer.BadParameter(f"partitions cannot be made on this machine: {err}",
                                 param_hint="--fault-kinds") from err
    typer.echo(runner.render(results))
    typer.echo(f"wrote {runner.write_results(results, out)}")
    runner.progress_path(options).unlink(missing_ok=True)  # superseded by the file just written
    if results["violations"]:
        raise typer.Exit(1)
