"""Signs that the local stack itself fell behind during a phase. They are not the product's doing, but they slow
whatever runs on the stack, so a phase's times are read beside them (a floor and a product phase of one run can differ
here, and the difference then explains part of the ratio).

kwok_rejected_plays      stage plays of KWOK that kube-apiserver refused. On a strained stack KWOK can play a pod's
                         Running stage a second time, from a copy of the pod that is still Pending; that play picks
                         another pod IP and is refused ("may specify no more than one IP for each IP family"). Each is
                         a wasted render, patch and validation.
terminated_pod_watchers  pod watches kube-apiserver closed because their client did not keep up with the events
                         (`apiserver_terminated_watchers_total{resource="pods"}`); the client then watches again.
"""

from __future__ import annotations

from pathlib import Path

from bench import promtext

REJECTED_PLAY = '"msg":"failed to apply stage"'
TERMINATED_WATCHERS = "apiserver_terminated_watchers_total"


def rejected_plays(kwok_log: Path) -> int:
    """KWOK's refused stage plays so far (its JSON log, one line each)."""
    try:
        with kwok_log.open("rb") as log:
            return sum(1 for line in log if REJECTED_PLAY.encode() in line)
    except FileNotFoundError:
        return 0


def terminated_pod_watchers(metrics_text: str) -> int:
    """kube-apiserver's count of pod watches it closed for falling behind, from its /metrics text (0 while absent: the
    counter appears with the first termination)."""
    return int(promtext.parse(metrics_text).total(TERMINATED_WATCHERS, group="", resource="pods"))


def since(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items()}
