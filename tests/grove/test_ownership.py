"""The one ownership rule for a replica's surplus objects (grove/ownership.py): by controller UID, never by name."""

from __future__ import annotations

import itertools
from typing import Any

from grove import names
from grove.ownership import controller_reference, scaling_groups_of, within_replica

PCS_UID = "pcs-uid"


def _ref(kind: str, name: str, uid: str, controller: Any = True) -> dict[str, Any]:
    return {"apiVersion": "grove.io/v1alpha1", "kind": kind, "name": name, "uid": uid, "controller": controller}


def _obj(name: str, *refs: dict[str, Any], uid: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": uid or f"{name}-uid"}
    if refs:
        meta["ownerReferences"] = list(refs)
    return {"metadata": meta}


PCSG = names.KIND_PODCLIQUESCALINGGROUP
OUR_GROUP = _obj("p-0-sg", _ref("PodCliqueSet", "p", PCS_UID), uid="sg-uid")
FOREIGN_GROUP = _obj("p-0-other", _ref("PodCliqueSet", "p", "old-pcs-uid"), uid="old-sg-uid")
GROUPS = scaling_groups_of(PCS_UID, [OUR_GROUP, FOREIGN_GROUP])


def test_scaling_groups_of_counts_only_those_the_pcs_controls_by_uid() -> None:
    assert frozenset({"sg-uid"}) == GROUPS
    uncontrolled = _obj("p-0-x", _ref("PodCliqueSet", "p", PCS_UID, controller=False), uid="x-uid")
    assert scaling_groups_of(PCS_UID, [uncontrolled, _obj("p-0-y", uid="y-uid")]) == frozenset()


def test_controlled_by_the_pcs_or_one_of_its_scaling_groups_is_ours() -> None:
    assert within_replica(_obj("p-0-a", _ref("PodCliqueSet", "p", PCS_UID)), PCS_UID, GROUPS)
    assert within_replica(_obj("p-0-sg-0-b", _ref(PCSG, "p-0-sg", "sg-uid")), PCS_UID, GROUPS)


def test_a_same_named_scaling_group_of_another_uid_is_not_ours() -> None:
    # The name matches our PCSG (the rule that looked at names said "ours"); the UID is a replaced PCSG's.
    clique = _obj("p-0-sg-0-b", _ref(PCSG, "p-0-sg", "replaced-sg-uid"))
    assert not within_replica(clique, PCS_UID, GROUPS)
    # ...and a PodClique of a PCSG that another PodCliqueSet controls is not ours either
    assert not within_replica(_obj("p-0-other-0-b", _ref(PCSG, "p-0-other", "old-sg-uid")), PCS_UID, GROUPS)


def test_no_owner_reference_or_no_controller_reference_is_not_ours() -> None:
    assert not within_replica(_obj("p-0-a"), PCS_UID, GROUPS)
    assert not within_replica({"metadata": {"name": "p-0-a", "ownerReferences": []}}, PCS_UID, GROUPS)
    assert not within_replica({}, PCS_UID, GROUPS)
    # our PCS as a mere (non-controller) owner is not enough: the rule that looked at every owner said "ours"
    assert not within_replica(_obj("p-0-a", _ref("PodCliqueSet", "p", PCS_UID, controller=False)), PCS_UID, GROUPS)
    assert not within_replica(_obj("p-0-a", _ref("PodCliqueSet", "p", PCS_UID, controller="true")), PCS_UID, GROUPS)


def test_a_foreign_controller_is_not_ours_even_with_our_pcs_as_another_owner() -> None:
    clique = _obj("p-0-a", _ref("PodCliqueSet", "p", PCS_UID, controller=False), _ref("Deployment", "x", "foreign"))
    assert not within_replica(clique, PCS_UID, GROUPS)
    assert not within_replica(_obj("p-0-a", _ref("PodCliqueSet", "p", "foreign")), PCS_UID, GROUPS)


def test_two_controller_references_or_empty_uids_are_never_evidence() -> None:
    two = _obj("p-0-a", _ref("PodCliqueSet", "p", PCS_UID), _ref(PCSG, "p-0-sg", "sg-uid"))
    assert controller_reference(two) is None and not within_replica(two, PCS_UID, GROUPS)
    assert not within_replica(_obj("p-0-a", _ref("PodCliqueSet", "p", "")), "", frozenset())
    assert not within_replica(_obj("p-0-a", {"kind": "PodCliqueSet", "controller": True}), "", frozenset())


# --- never "ours" on less evidence than either of the two rules it replaces ------------------------------------------
def _by_uid_any_owner(obj: dict[str, Any], pcs_uid: str, group_uids: frozenset[str]) -> bool:
    """The rule delete_replica and ensure_replica used: any ownerReference, by UID."""
    owners = {r.get("uid") for r in obj.get("metadata", {}).get("ownerReferences") or []}
    return pcs_uid in owners or bool(owners & group_uids)


def _by_controller_name(obj: dict[str, Any], pcs_uid: str, group_names: set[str]) -> bool:
    """The rule drift used: the first controller reference, a PCSG by name."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return bool(ref.get("uid") == pcs_uid or (ref.get("kind") == PCSG and ref.get("name") in group_names))
    return False


def test_the_rule_is_never_looser_than_either_rule_it_replaces() -> None:
    candidates = [
        _ref("PodCliqueSet", "p", PCS_UID), _ref("PodCliqueSet", "p", PCS_UID, controller=False),
        _ref("PodCliqueSet", "p", "old-pcs-uid"), _ref(PCSG, "p-0-sg", "sg-uid"),
        _ref(PCSG, "p-0-sg", "sg-uid", controller=False), _ref(PCSG, "p-0-sg", "replaced-sg-uid"),
        _ref(PCSG, "p-0-other", "old-sg-uid"), _ref("Deployment", "x", "foreign"), _ref("PodCliqueSet", "p", ""),
    ]
    checked = ours = 0
    for size in range(3):
        for refs in itertools.permutations(candidates, size):
            obj = _obj("p-0-sg-0-b", *refs)
            if within_replica(obj, PCS_UID, GROUPS):
                ours += 1
                assert _by_uid_any_owner(obj, PCS_UID, GROUPS), refs
                assert _by_controller_name(obj, PCS_UID, {"p-0-sg"}), refs
            checked += 1
    assert checked == 1 + 9 + 72 and ours > 0
