"""Hypothesis strategies shared by the unit tests: valid PodCliqueSets of every shape."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


@st.composite
def valid_pcs(draw: st.DrawFn, max_replicas: int = 3) -> dict[str, Any]:
    """A valid PodCliqueSet manifest: standalone cliques and scaling groups over a partition of the cliques.

    Names are short and distinct by construction (cliques c<k>, groups g<k>), so no generated names collide.
    """
    clique_count = draw(st.integers(1, 5))
    cliques = []
    for k in range(clique_count):
        replicas = draw(st.integers(1, 4))
        spec: dict[str, Any] = {"replicas": replicas}
        if draw(st.booleans()):
            spec["minAvailable"] = draw(st.integers(1, replicas))
        cliques.append({"name": f"c{k}", "spec": spec})
    # Assign each clique to a group number or to no group (-1).
    assignment = draw(st.lists(st.integers(-1, 2), min_size=clique_count, max_size=clique_count))
    groups = []
    for g in sorted({a for a in assignment if a >= 0}):
        group: dict[str, Any] = {
            "name": f"g{g}",
            "cliqueNames": [f"c{k}" for k, a in enumerate(assignment) if a == g],
        }
        replicas = draw(st.none() | st.integers(1, 5))
        if replicas is not None:
            group["replicas"] = replicas
        if draw(st.booleans()):
            group["minAvailable"] = draw(st.integers(1, replicas or 1))
        if draw(st.booleans()):
            group["terminationDelay"] = draw(st.sampled_from(["30m", "2h", "90s"]))
        groups.append(group)
    template: dict[str, Any] = {"cliques": cliques, "podCliqueScalingGroups": groups}
    if draw(st.booleans()) or any("terminationDelay" in g for g in groups):
        template["terminationDelay"] = draw(st.sampled_from(["4h", "1h30m"]))
    return {
        "apiVersion": "grove.io/v1alpha1",
        "kind": "PodCliqueSet",
        "metadata": {"name": draw(st.sampled_from(["p", "my-pcs", "serve"])), "namespace": "ns"},
        "spec": {"replicas": draw(st.integers(0, max_replicas)), "template": template},
    }
