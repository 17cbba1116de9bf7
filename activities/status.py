"""The status mirror (DESIGN §4.8): what the workflow decided, written where `kubectl get` users look.

Status is output only: the workflow never reads it back. A condition keeps its lastTransitionTime while its status
stays the same, as Kubernetes conventions ask.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from activities.coalesce import GroupCommit
from activities.fanout import fan_out
from activities.kubeapi import (
    JSON,
    PODCLIQUES,
    PODCLIQUESETS,
    SCALINGGROUPS,
    Kube,
    KubeError,
    generation_observed,
)
from activities.observe import uid_of
from activities.watch_cache import NotFresh, WatchCache
from grove import names
from grove.pcs_count import has_scaling_groups, pcs_figures
from grove.scale import podclique_selector, scaling_group_selector
from workflows.messages import ConditionMirror, MirrorRequest, ObjectStatusMirror

_RESOURCES = {names.KIND_PODCLIQUE: PODCLIQUES, names.KIND_PODCLIQUESCALINGGROUP: SCALINGGROUPS}


def merged_conditions(current: list[JSON], desired: tuple[ConditionMirror, ...], now: str) -> list[JSON]:
    by_type = {c.get("type"): c for c in current}
    merged = [c for c in current if c.get("type") not in {d.type for d in desired}]
    for want in desired:
        had = by_type.get(want.type) or {}
        since = had.get("lastTransitionTime") if had.get("status") == want.status else None
        merged.append(
            {
                "type": want.type,
                "status": want.status,
                "reason": want.reason,
                "message": want.message,
                "lastTransitionTime": since or now,
            }
        )
    return sorted(merged, key=lambda c: str(c.get("type")))


def desired_status(current: JSON, mirror: ObjectStatusMirror, now: str) -> JSON:
    status = dict(current.get("status") or {})
    status.update(mirror.fields)
    status.update(mirror.texts)
    status["conditions"] = merged_conditions(list(status.get("conditions") or []), mirror.conditions, now)
    return status


def mirror(kube: Kube, request: MirrorRequest, cache: WatchCache | None = None,
           recounts: GroupCommit[bool] | None = None, *, count_pcs: bool = True) -> list[str]:
    """Patch the status of each object whose status differs; returns the names written.

    The current status (for the conditions' lastTransitionTime) comes from the worker's watch cache where it holds
    the object at the UID decided on, so a write costs one request, not a GET and a PATCH (issue 17). A cached copy
    may lag a moment behind our own last write, so it never vetoes a write as unchanged: the workflow sends only
    objects whose mirrored digest changed. Otherwise (no cache, not synced, not there yet, another UID) a GET.

    Where a watcher runs, its leader keeps the PCS's figures (worker/pcs_status.py) and `count_pcs` is False.
    Otherwise the PCS is recounted here, shared (`recounts`) with the other replicas of the PCS that ask for one at
    the same time in this worker: each gets a recount that began after its own writes."""
    ref = request.ref
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    def write(item: ObjectStatusMirror) -> bool:
        resource = _RESOURCES[item.kind]
        current = _cached(cache, resource.kind, ref.namespace, item.name, item.uid)
        cached = current is not None
        if current is None:
            current = kube.get(resource, ref.namespace, item.name)
        if current is None or (item.uid and uid_of(current) != item.uid):
            return False  # gone or recreated since the decision: the next evaluation mirrors the new one
        selector = _selector(ref.pcs, item)
        status = {**desired_status(current, item, now), **selector}
        # Only the fields this mirror sets: a field another writer keeps is never sent back as this possibly older
        # copy has it.
        owned = {*item.fields, *item.texts, "conditions", *selector}
        patch = {key: value for key, value in status.items() if key in owned}
        had = current.get("status") or {}
        if not cached and all(had.get(key) == value for key, value in patch.items()):
            return False
        try:
            kube.patch(resource, ref.namespace, item.name, {"status": patch}, subresource="status")
        except KubeError as exc:
            if cached and exc.not_found:
                return False  # deleted after the cache saw it: as for a GET that found nothing
            raise
        return True

    # The objects are independent of each other; the PCS is counted from their mirrored status, so it goes last.
    done = fan_out([functools.partial(write, item) for item in request.objects])
    written = [item.name for item, wrote in zip(request.objects, done, strict=True) if wrote]
    if count_pcs and request.pcs_available_changed:
        # Whether to list PCSGs at once: the cached PCS tells (a guess only; the recount checks the fresh PCS).
        cached_pcs = _cached(cache, names.KIND_PODCLIQUESET, ref.namespace, ref.pcs, ref.pcs_uid)
        expect_groups = cached_pcs is None or has_scaling_groups(cached_pcs)
        recount = functools.partial(mirror_pcs, kube, ref.namespace, ref.pcs, ref.pcs_uid, expect_groups)
        if recounts.run((ref.namespace, ref.pcs, ref.pcs_uid), recount) if recounts is not None else recount():
            written.append(ref.pcs)
    return written


# Rounds of mirror_pcs: a write is followed by a read that confirms it (see below); more than two rounds means
# replica workflows are racing on this PCS right now, and whichever writes last confirms in its own next round.
PCS_MIRROR_ROUNDS = 3


def mirror_pcs(kube: Kube, namespace: str, pcs: str, pcs_uid: str, expect_groups: bool = True) -> bool:
    """PCS replicas and availableReplicas, from the mirrored status of its PodCliques and PCSGs.

    A replica counts as available the way grove.availability.replica_available decides: every standalone
    PodClique has minAvailable Ready pods and every PCSG has minAvailable available replicas.

    Every replica workflow of the PCS writes these figures after mirroring its own objects. One whose reads missed
    another replica's PodClique write could write a stale count after the other had written the right one, and it
    would stay wrong until some replica's availability changed again. So a writer lists again after its write (one
    LIST, two with scaling groups) and writes again if the figures moved: of all writers, the one that writes last
    lists after every PodClique write that came before its write, and corrects it.

    `expect_groups=False` (the caller's cached PCS has no scaling groups) leaves the PCSGs unread unless the fresh
    PCS has some after all."""
    written: JSON | None = None  # the PCS as our last write left it: its spec for the count, its status to compare
    for _ in range(PCS_MIRROR_ROUNDS):
        patched = _mirror_pcs_once(kube, namespace, pcs, pcs_uid, written, expect_groups)
        if patched is None:
            break
        written = patched
    return written is not None


def _mirror_pcs_once(kube: Kube, namespace: str, pcs: str, pcs_uid: str, written: JSON | None,
                     expect_groups: bool = True) -> JSON | None:
    """One read and, if the figures differ, one write: the PCS as patched, or None if nothing was written. After a
    write of ours (`written`) only the PodCliques (and PCSGs, where the template has any) are read again."""
    selector = names.pcs_selector(pcs)
    groups_read = functools.partial(kube.list_items, SCALINGGROUPS, namespace, label_selector=selector)
    skip_groups = not has_scaling_groups(written) if written is not None else not expect_groups
    read: list[Callable[[], Any]] = [
        (lambda: written) if written is not None else functools.partial(kube.get, PODCLIQUESETS, namespace, pcs),
        functools.partial(kube.list_items, PODCLIQUES, namespace, label_selector=selector),
        list if skip_groups else groups_read,
    ]
    obj, pclqs, groups = fan_out(read)
    if obj is None or uid_of(obj) != pcs_uid:
        return None
    if skip_groups and has_scaling_groups(obj):  # the guess was stale: the PCS has scaling groups now
        groups = groups_read()
    figures = pcs_figures(obj, pclqs, groups)
    if figures is None:
        return None  # invalid spec: keep the last mirrored figures
    status = dict(obj.get("status") or {})
    desired = {**status, **figures}
    if desired == status:
        return None
    patched: JSON = kube.patch(PODCLIQUESETS, namespace, pcs, {"status": figures}, subresource="status")
    return patched


def write_pcs_condition(kube: Kube, obj: JSON, kind: str, status: str, reason: str, message: str) -> None:
    """Set one condition on a PCS's status, keeping the others of `obj` (as read) and the transition time while the
    status stays the same. A PCS deleted meanwhile is not an error."""
    meta = obj["metadata"]
    conditions = (obj.get("status") or {}).get("conditions") or []
    had: JSON = next((c for c in conditions if c.get("type") == kind), {})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": had.get("lastTransitionTime") if had.get("status") == status else now,
        "observedGeneration": meta.get("generation"),
    }
    others = [c for c in conditions if c.get("type") != kind]
    _patch_pcs_status(kube, obj, {"conditions": [*others, condition]})


def write_observed_generation(kube: Kube, obj: JSON) -> None:
    """`status.observedGeneration`: the generation of the PCS (as read, `obj`) that the reconciler has judged and
    started every replica's workflow for, as Kubernetes controllers report it (`kubectl wait`, GitOps health checks).
    A restarted worker's watcher hands the reconciler only PodCliqueSets whose generation is not observed yet
    (worker/watcher.py). Written only when it differs. A PCS deleted meanwhile is not an error."""
    if obj["metadata"].get("generation") is not None and not generation_observed(obj):
        _patch_pcs_status(kube, obj, {"observedGeneration": obj["metadata"]["generation"]})


def _patch_pcs_status(kube: Kube, obj: JSON, status: JSON) -> None:
    """Merge `status` into the PCS's status; a PCS deleted meanwhile is not an error."""
    meta = obj["metadata"]
    try:
        kube.patch(PODCLIQUESETS, meta["namespace"], meta["name"], {"status": status}, subresource="status")
    except KubeError as exc:
        if not exc.not_found:
            raise


def _cached(cache: WatchCache | None, kind: str, namespace: str, name: str, uid: str | None) -> JSON | None:
    """The watch cache's copy of the object, if it has it at this UID; None: read the apiserver."""
    if cache is None:
        return None
    try:
        found = cache.get(kind, namespace, name)
    except NotFresh:
        return None
    if found is None or (uid and uid_of(found) != uid):
        return None
    return found


def _selector(pcs: str, item: ObjectStatusMirror) -> dict[str, str]:
    """The scale subresource's selectorpath (DESIGN §4.10): the pods an HPA reads metrics from."""
    if item.kind == names.KIND_PODCLIQUESCALINGGROUP:
        return {"selector": scaling_group_selector(pcs, item.name)}
    return {"hpaPodSelector": podclique_selector(pcs, item.name)}
