"""The PodCliqueSet's availableReplicas, counted from its PodCliques' readyReplicas (pure): a PCSG is available
where minAvailable of its replicas have every PodClique at minAvailable, whatever the PCSG's own availableReplicas
(written by the workflow's rounds, which may wait for the status window) says."""

from __future__ import annotations

from typing import Any

from grove import names
from grove.pcs_count import pcs_figures


def _pclq(name: str, replica: int, ready: int, min_available: int = 1, group: tuple[str, int] | None = None,
          deleting: bool = False) -> dict[str, Any]:
    labels = {names.LABEL_PCS_REPLICA_INDEX: str(replica)}
    if group is not None:
        labels[names.LABEL_PCSG], labels[names.LABEL_PCSG_REPLICA_INDEX] = group[0], str(group[1])
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": meta, "spec": {"replicas": 2, "minAvailable": min_available},
            "status": {"readyReplicas": ready}}


def _pcsg(name: str, replica: int, stale_available: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {names.LABEL_PCS_REPLICA_INDEX: str(replica)}},
            "spec": {"replicas": 2, "minAvailable": 1, "cliqueNames": ["l", "w"]},
            "status": {"availableReplicas": stale_available}}


def test_a_scaling_group_counts_as_available_from_its_podcliques_not_its_own_mirrored_figure() -> None:
    pcs = {"metadata": {"name": "p"}, "spec": {"replicas": 3}}
    pclqs = [
        # replica 0: its PCSG replica 0 has both PodCliques Ready; the PCSG's own figure still says 0
        _pclq("p-0-a", 0, 1), _pclq("p-0-g-0-l", 0, 1, group=("p-0-g", 0)),
        _pclq("p-0-g-0-w", 0, 2, 2, group=("p-0-g", 0)), _pclq("p-0-g-1-w", 0, 0, group=("p-0-g", 1)),
        # replica 1: no PCSG replica has every PodClique (one is missing, one is being deleted), though its figure
        # says 2
        _pclq("p-1-a", 1, 1), _pclq("p-1-g-0-w", 1, 1, group=("p-1-g", 0)),
        _pclq("p-1-g-1-l", 1, 1, group=("p-1-g", 1)), _pclq("p-1-g-1-w", 1, 1, group=("p-1-g", 1), deleting=True),
        # replica 2: every PCSG PodClique Ready, one below its minAvailable of 2
        _pclq("p-2-a", 2, 1), _pclq("p-2-g-0-l", 2, 1, group=("p-2-g", 0)),
        _pclq("p-2-g-0-w", 2, 1, 2, group=("p-2-g", 0)),
    ]
    groups = [_pcsg("p-0-g", 0, 0), _pcsg("p-1-g", 1, 2), _pcsg("p-2-g", 2, 1)]
    figures = pcs_figures(pcs, pclqs, groups)
    assert figures is not None and (figures["replicas"], figures["availableReplicas"]) == (3, 1)

    pclqs[0] = _pclq("p-0-a", 0, 0)  # replica 0's standalone PodClique not Ready: no replica available
    figures = pcs_figures(pcs, pclqs, groups)
    assert figures is not None and figures["availableReplicas"] == 0
