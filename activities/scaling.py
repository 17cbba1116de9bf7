"""Day-2 pieces of materialising (DESIGN §4.10): scale-in order, clamped counts, the HorizontalPodAutoscalers of a
PodCliqueSet, the UnsupportedFields condition, and starting pods that waited for their startup order.

HPAs are kept per PodCliqueSet, as Grove's HPA component does: the reconciler syncs them whenever the PCS changes
(and on its full passes for PCSes that autoscale), so removing a config or scaling the PCS in removes its HPAs.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import events
from activities.fanout import fan_out
from activities.kubeapi import (
    HPAS,
    JSON,
    PODCLIQUESETS,
    PODS,
    Kube,
    KubeError,
    condition_of,
    controller_uid,
    name_of,
    ours,
    terminating,
    uid_of,
)
from activities.observe import parsed_pcs, planned_replica
from activities.status import write_pcs_condition
from activities.watch_cache import WatchCache
from grove import manifests, names
from grove.autoscaling import hpa_differs, hpa_manifests
from grove.fields import unsupported_fields
from grove.models import PodCliqueSet
from grove.plan import ReplicaPlan
from grove.scale import ObservedCounts, clamped
from grove.startup import startup_warnings
from grove.validation import parse_pcs, warnings_for
from workflows.contract import RELEASE_STARTUP
from workflows.messages import ReplicaRef, StartupRequest, StartupResult

log = logging.getLogger(__name__)


# --- scaling -------------------------------------------------------------------------------------------------------
def config_annotations(pcs: PodCliqueSet, config_name: str) -> dict[str, str]:
    for group in pcs.spec.template.pod_clique_scaling_groups:
        if group.name == config_name:
            return dict(group.annotations or {})
    return {}


def scale_in_order(pclqs: Mapping[str, JSON]) -> list[tuple[str, JSON]]:
    """PodCliques ordered for deletion: the highest scaling-group replica index first, standalone ones last."""

    def key(item: tuple[str, JSON]) -> tuple[int, str]:
        index = (item[1].get("metadata", {}).get("labels") or {}).get(names.LABEL_PCSG_REPLICA_INDEX, "")
        return (-int(index) if str(index).isdigit() else 1, item[0])

    return sorted(pclqs.items(), key=key)


def report_clamped(kube: Kube, ref: ReplicaRef, counts: ObservedCounts, plan: ReplicaPlan | None) -> None:
    """A scale write below minAvailable was raised to it (grove.scale): say so where kubectl users look."""
    if plan is None:
        return
    planned = {g.name: g.replicas for g in plan.scaling_groups} | {p.name: p.replicas for p in plan.pod_cliques}
    lines = clamped(counts, planned)
    if lines:
        log.warning("scale clamped for %s: %s", ref, "; ".join(lines))
        events.record(kube, ref, "ScaleClamped", "; ".join(lines) + " (the base gang keeps minAvailable)",
                      type="Warning")


# --- HorizontalPodAutoscalers ----------------------------------------------------------------------------------------
def autoscales(pcs_obj: JSON) -> bool:
    template = (pcs_obj.get("spec") or {}).get("template") or {}
    return any((c.get("spec") or {}).get("autoScalingConfig") for c in template.get("cliques") or []) or any(
        g.get("scaleConfig") for g in template.get("podCliqueScalingGroups") or [])


def sync_autoscalers(kube: Kube, pcs_obj: JSON) -> list[str]:
    """Create, update and delete the PCS's HPAs to match its spec (valid specs only). Returns what changed."""
    pcs, problems = parsed_pcs(pcs_obj)
    meta = pcs_obj["metadata"]
    namespace, name, uid = meta["namespace"], meta["name"], meta["uid"]
    if pcs is None or problems:
        return []
    owner = manifests.owner_reference(names.GROVE_API_VERSION, names.KIND_PODCLIQUESET, name, uid)
    desired: dict[str, JSON] = {}
    for index in range(pcs.spec.replicas):
        for body in hpa_manifests(pcs, planned_replica(pcs_obj, pcs, index), owner=owner):
            desired[body["metadata"]["name"]] = body
    selector = f"{names.pcs_selector(name)},{names.LABEL_COMPONENT}={names.COMPONENT_HPA}"
    existing = {name_of(h): h for h in kube.list_items(HPAS, namespace, label_selector=selector)}
    changed: list[str] = []
    for hpa_name, body in desired.items():
        current = existing.get(hpa_name)
        try:
            if current is None:
                kube.create(HPAS, namespace, body)
                changed.append(f"created HorizontalPodAutoscaler/{hpa_name}")
            elif not terminating(current) and controller_uid(current) == uid and hpa_differs(current, body):
                spec = dict(body["spec"])
                spec.setdefault("metrics", None)  # metrics dropped from the config: back to the HPA's default
                kube.patch(HPAS, namespace, hpa_name, {"spec": spec})
                changed.append(f"updated HorizontalPodAutoscaler/{hpa_name}")
        except KubeError as exc:
            if not exc.conflict:
                raise
    for hpa_name, current in existing.items():
        if (hpa_name not in desired and ours(current) and not terminating(current) and controller_uid(current) == uid
                and kube.delete(HPAS, namespace, hpa_name, uid=uid_of(current))):
            changed.append(f"deleted HorizontalPodAutoscaler/{hpa_name}")
    if changed:
        log.info("autoscalers of %s/%s: %s", namespace, name, ", ".join(changed))
        events.record_for_pcs(kube, namespace, name, uid, "AutoscalersSynced", "; ".join(changed))
    return changed


# --- Grove fields not implemented --------------------------------------------------------------------------------
def mirror_unsupported(kube: Kube, pcs_obj: JSON) -> None:
    """Condition UnsupportedFields on the PCS, and a Warning Event when the set of such fields changes."""
    pcs, problems = parse_pcs(pcs_obj)
    if pcs is None or problems:
        return
    found = [str(p) for p in unsupported_fields(pcs) + list(startup_warnings(pcs))]
    unknown = [str(p) for p in warnings_for(pcs) if str(p) not in found and "unknown field" in p.message]
    found += unknown
    meta = pcs_obj["metadata"]
    want = "True" if found else "False"
    message = "; ".join(found)[:1000] if found else "every field set is implemented"
    current = condition_of(pcs_obj, names.CONDITION_UNSUPPORTED_FIELDS)
    if current.get("status") == want and current.get("message") == message:
        return
    if not current and not found:
        return  # nothing to report, and nothing was reported before: no write at all
    fresh = kube.get(PODCLIQUESETS, meta["namespace"], meta["name"])
    if fresh is None or uid_of(fresh) != meta.get("uid"):
        return
    write_pcs_condition(kube, fresh, names.CONDITION_UNSUPPORTED_FIELDS, want,
                        names.REASON_UNSUPPORTED_FIELDS if found else names.REASON_ALL_FIELDS_SUPPORTED, message)
    if found:
        log.warning("PodCliqueSet %s/%s sets fields grove-temporal does not act on: %s", meta["namespace"],
                    meta["name"], message)
        events.record_for_pcs(kube, meta["namespace"], meta["name"], meta["uid"], "UnsupportedFields",
                              f"Not acted on (kept as written): {message}", type="Warning")


# --- startup order -------------------------------------------------------------------------------------------------
class StartupActivities:
    def __init__(self, kube: Kube, cache: WatchCache | None = None) -> None:
        self.kube = kube
        self.cache = cache  # the worker's watch cache: the next round's read sees the pods marked (WatchCache.wrote)

    @activity.defn(name=RELEASE_STARTUP)
    def release_startup(self, request: StartupRequest) -> StartupResult:
        """Mark waiting pods Released: their init container sees it through the downward API and lets them start."""

        def release(pod: str, uid: str) -> bool:
            patch = {"metadata": {"uid": uid, "annotations": {names.ANNOTATION_STARTUP: names.STARTUP_RELEASED}}}
            try:
                written = self.kube.patch(PODS, request.ref.namespace, pod, patch)
                if self.cache is not None:
                    self.cache.wrote(PODS, written)
                return True
            except KubeError as exc:
                if exc.not_found or exc.conflict or exc.replaced:  # gone, or the name is another pod's now
                    return False
                if exc.invalid or exc.forbidden:
                    raise _non_retryable(exc) from exc
                raise

        pods = sorted(request.pods.items())
        done = fan_out([functools.partial(release, pod, uid) for pod, uid in pods])
        started = tuple(pod for (pod, _), ok in zip(pods, done, strict=True) if ok)
        if started:
            why = "; ".join(f"{pclq} after {', '.join(parents)} Ready" for pclq, parents in
                            sorted(request.cliques.items()))
            log.info("startup order: started %d pods of %s (%s)", len(started), request.ref, why)
            events.record(self.kube, request.ref, "StartupReleased",
                          f"Started {len(started)} pod(s) whose startup order is met: {why}")
        return StartupResult(started=started, skipped=tuple(p for p, _ in pods if p not in started))


def _non_retryable(exc: KubeError) -> Exception:
    return ApplicationError(f"mark pods started: {exc.message}", type="RejectedByApiServer", non_retryable=True)


def sync_day2(kube: Kube, pcs_obj: JSON, changed: bool) -> None:
    """The reconciler's per-PCS step for a valid spec: the UnsupportedFields condition, and the HPAs (on a change,
    or on a full pass when the PCS autoscales)."""
    mirror_unsupported(kube, pcs_obj)
    if changed or autoscales(pcs_obj):
        sync_autoscalers(kube, pcs_obj)
