"""Generated PodCliqueSets for comparing the two renderings of the rules (CEL and Python): semantic variations of
names, counts, durations and scaling groups, valid and invalid. Clique and scaling group names come from disjoint
alphabets, and PodCliqueSet names avoid '.' and leading digits, so that the workflow-only rules (grove.rules
.WORKFLOW_ONLY) never fire: every verdict is one the apiserver can give too."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.corpus.bad_manifests import base

_clique_names = st.sampled_from(["a", "b", "c", "Ab", "", "a" * 64])
_group_names = st.sampled_from(["g", "h", "Gx"])
_counts = st.integers(-1, 4)
_delays = st.sampled_from([None, "1h", "30s", "0s", "-1s", "1m30s"])


@st.composite
def pcs_documents(draw: st.DrawFn) -> dict[str, Any]:
    doc = base(draw(st.sampled_from(["fuzz", "Fuzz", "f" * 70])))
    template = doc["spec"]["template"]
    cliques = []
    for name in draw(st.lists(_clique_names, min_size=0, max_size=3, unique=True)):
        spec: dict[str, Any] = {"replicas": draw(_counts), "podSpec": {"containers": [{"name": "m", "image": "x"}]}}
        if draw(st.booleans()):
            spec["minAvailable"] = draw(_counts)
        cliques.append({"name": name, "spec": spec})
    template["cliques"] = cliques
    groups = []
    for name in draw(st.lists(_group_names, min_size=0, max_size=2, unique=True)):
        group: dict[str, Any] = {"name": name, "cliqueNames": draw(st.lists(_clique_names, max_size=3))}
        for key in ("replicas", "minAvailable"):
            if draw(st.booleans()):
                group[key] = draw(_counts)
        if (delay := draw(_delays)) is not None:
            group["terminationDelay"] = delay
        groups.append(group)
    template["podCliqueScalingGroups"] = groups
    if (delay := draw(_delays)) is None:
        del template["terminationDelay"]
    else:
        template["terminationDelay"] = delay
    doc["spec"]["replicas"] = draw(st.integers(0, 3))
    return doc
