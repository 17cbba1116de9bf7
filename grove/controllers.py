"""One controller per PodCliqueSet. grove-temporal drives a PodCliqueSet only while no other controller does:
when the Grove operator has claimed it (its finalizer on the PodCliqueSet) or manages objects of the replica (its
`app.kubernetes.io/managed-by: grove-operator` label on PodCliques, pods or PodGangs named after it), the replica
is held exactly like an invalid one: nothing is created, released, terminated or deleted, and the PodCliqueSet gets
SpecValid=False with this message and an InvalidSpec Event. Deleting the other controller's claim (see docs/operations.md,
"Running beside the Grove operator") lets grove-temporal take over at its next round."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from grove import names

PROBLEM_PATH = names.LABEL_MANAGED_BY


def other_controller_problem(finalizers: Sequence[str], foreign: Iterable[tuple[str, str]]) -> str | None:
    """`field.path: message` when another controller drives the PodCliqueSet, else None.

    foreign: (kind, name) of the replica's objects labelled managed-by=grove-operator."""
    claimed = names.GROVE_OPERATOR_PCS_FINALIZER in finalizers
    objects = sorted(f"{kind}/{name}" for kind, name in foreign)
    if not claimed and not objects:
        return None
    evidence = []
    if claimed:
        evidence.append(f"the PodCliqueSet carries the finalizer {names.GROVE_OPERATOR_PCS_FINALIZER}")
    if objects:
        shown = ", ".join(objects[:5]) + (f" and {len(objects) - 5} more" if len(objects) > 5 else "")
        evidence.append(f"{shown} {'is' if len(objects) == 1 else 'are'} labelled "
                        f"{names.LABEL_MANAGED_BY}={names.GROVE_OPERATOR_MANAGED_BY}")
    return (f"{PROBLEM_PATH}: managed by {names.GROVE_OPERATOR_MANAGED_BY} ({'; '.join(evidence)}); grove-temporal "
            "holds this replica and changes nothing while another controller drives it")
