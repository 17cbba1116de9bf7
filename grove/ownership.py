"""Which of a replica's objects are ours to delete: the one ownership rule, on plain object dicts.

An object (a surplus PodClique, PodGang, PCSG or Service found under the replica's labels) belongs to a replica only
if its controller ownerReference names, by UID, the PodCliqueSet itself or a PodCliqueScalingGroup that the
PodCliqueSet controls (again by UID). Names are never evidence: a same-named PCSG of a replaced PodCliqueSet, or a
look-alike with our labels and a foreign controller, is not ours. An object with no controller reference, an empty
UID, or more than one controller reference (which the apiserver would refuse) is not ours either.

This decides deletions, so it errs on the side of "not ours": the callers ask it before deleting (ensure_replica's
scale-in of surplus PodCliques, delete_replica) and before calling something drift that ensure_replica would delete.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

Obj = Mapping[str, Any]


def controller_reference(obj: Obj) -> Mapping[str, Any] | None:
    """The one ownerReference with controller=true; None if there is none, or (invalid) more than one."""
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    controllers = [ref for ref in refs if isinstance(ref, Mapping) and ref.get("controller") is True]
    return controllers[0] if len(controllers) == 1 else None


def controlled_by(obj: Obj, uids: Collection[str]) -> bool:
    """The object's controller is one of these UIDs (an empty or missing UID is never a match)."""
    ref = controller_reference(obj)
    uid = ref.get("uid") if ref is not None else None
    return isinstance(uid, str) and bool(uid) and uid in uids


def scaling_groups_of(pcs_uid: str, scaling_groups: Iterable[Obj]) -> frozenset[str]:
    """UIDs of the PodCliqueScalingGroups the PodCliqueSet `pcs_uid` controls (terminating ones too: their
    PodCliques are still the replica's)."""
    found = set()
    for group in scaling_groups:
        uid = (group.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and uid and controlled_by(group, (pcs_uid,)):
            found.add(uid)
    return frozenset(found)


def within_replica(obj: Obj, pcs_uid: str, scaling_group_uids: Collection[str]) -> bool:
    """Controlled by the PodCliqueSet `pcs_uid`, or by one of `scaling_group_uids` (from scaling_groups_of)."""
    return controlled_by(obj, (pcs_uid, *scaling_group_uids))
