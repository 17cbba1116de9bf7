"""The expected objects of one PodCliqueSet replica (DESIGN §3, seeds 003 and 004).

`plan_replica(pcs, i)` answers, without touching the cluster: which PodCliques, PodCliqueScalingGroups, PodGangs
(base and scaled, with their podgroups and minReplicas), pods and headless Service replica `i` must have, with
their names and labels. The workflow compares this with what it observes; grove.manifests turns it into objects.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from grove import names
from grove.durations import format_duration
from grove.models import PodCliqueScalingGroupConfig, PodCliqueSet, PodCliqueTemplateSpec
from grove.problems import Problem
from grove.rollout import pod_template_hash
from grove.scale import ObservedCounts, most_pods, most_scaling_group_replicas
from grove.startup import PodCliqueRef, clique_dependencies, resolve
from grove.topology import CliqueUnit, ReplicaTopology, ScalingGroupUnit
from grove.validation import defaulted, validate_pcs

ReleaseAfter = Literal["Scheduled", "Ready"]


class InvalidPodCliqueSet(ValueError):
    """Raised when asked to plan a PodCliqueSet that does not validate."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("invalid PodCliqueSet:\n" + "\n".join(f"  {p}" for p in problems))


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScalingGroupRef(_Frozen):
    name: str  # the PCSG object name, e.g. 'p-0-prefill'
    replica_index: int


class PodPlan(_Frozen):
    """One pod's identity. Its name is its hostname, so creating it twice is harmless."""

    name: str
    pod_clique: str
    clique: str
    index: int
    pod_gang: str
    base: bool
    subdomain: str
    labels: dict[str, str]
    env: dict[str, str]

    @property
    def hostname(self) -> str:
        return self.name


class PodCliquePlan(_Frozen):
    name: str
    clique: str
    replicas: int
    min_available: int
    pod_gang: str
    base: bool  # True when pod_gang is the replica's base PodGang
    scaling_group: ScalingGroupRef | None
    labels: dict[str, str]
    starts_after: tuple[str, ...] = ()  # PodCliques of the same gang whose pods must all be Ready first
    pod_template_hash: str = ""  # grove.rollout.pod_template_hash of its clique; labels its pods

    @property
    def pod_names(self) -> tuple[str, ...]:
        return tuple(names.pod_name(self.name, index) for index in range(self.replicas))


class ScalingGroupPlan(_Frozen):
    name: str
    config_name: str
    replicas: int
    min_available: int
    clique_names: tuple[str, ...]
    termination_delay: timedelta | None  # its own override; see ReplicaPlan.effective_delay
    labels: dict[str, str]


class PodGroupPlan(_Frozen):
    """An entry of a PodGang's spec.podgroups: one PodClique; podReferences come from the live pods."""

    name: str
    min_replicas: int
    pod_names: tuple[str, ...]


class PodGangPlan(_Frozen):
    name: str
    base: bool
    pod_groups: tuple[PodGroupPlan, ...]
    scaling_group: ScalingGroupRef | None  # the PCSG replica a scaled gang holds; None for the base gang
    labels: dict[str, str]


class ServicePlan(_Frozen):
    name: str
    labels: dict[str, str]
    selector: dict[str, str]
    publish_not_ready_addresses: bool


class ReplicaPlan(_Frozen):
    pcs: str
    namespace: str
    replica: int
    pod_cliques: tuple[PodCliquePlan, ...]
    scaling_groups: tuple[ScalingGroupPlan, ...]
    pod_gangs: tuple[PodGangPlan, ...]  # the base gang first, then scaled gangs
    service: ServicePlan
    termination_delay: timedelta | None
    scaled_release_after: ReleaseAfter
    priority_class_name: str | None = None  # spec.template.priorityClassName: pods and PodGangs

    # --- lookups ---
    def pod_clique(self, name: str) -> PodCliquePlan:
        return _find(self.pod_cliques, name, "PodClique")

    def scaling_group(self, name: str) -> ScalingGroupPlan:
        return _find(self.scaling_groups, name, "PodCliqueScalingGroup")

    def pod_gang(self, name: str) -> PodGangPlan:
        return _find(self.pod_gangs, name, "PodGang")

    @property
    def base_gang(self) -> PodGangPlan:
        return self.pod_gangs[0]

    @property
    def scaled_gangs(self) -> tuple[PodGangPlan, ...]:
        return self.pod_gangs[1:]

    def gang_of(self, pod_clique: str) -> PodGangPlan:
        """The PodGang a PodClique belongs to."""
        return self.pod_gang(self.pod_clique(pod_clique).pod_gang)

    def is_base(self, pod_clique: str) -> bool:
        """True when the PodClique is in the base gang, False when it is in a scaled gang."""
        return self.pod_clique(pod_clique).base

    def members(self, scaling_group: str, replica_index: int) -> tuple[PodCliquePlan, ...]:
        """The PodCliques of one scaling group replica."""
        ref = ScalingGroupRef(name=scaling_group, replica_index=replica_index)
        return tuple(p for p in self.pod_cliques if p.scaling_group == ref)

    def standalone(self) -> tuple[PodCliquePlan, ...]:
        return tuple(p for p in self.pod_cliques if p.scaling_group is None)

    def effective_delay(self, scaling_group: str | None) -> timedelta | None:
        return self.topology().effective_delay(scaling_group)

    # --- pods ---
    def pod(self, pod_clique: str, index: int) -> PodPlan:
        pclq = self.pod_clique(pod_clique)
        if not 0 <= index < pclq.replicas:
            raise KeyError(f"pod index {index} outside 0..{pclq.replicas - 1} of PodClique {pod_clique}")
        return _pod_plan(self, pclq, index)

    def pods(self, pod_clique: str | None = None) -> tuple[PodPlan, ...]:
        """Every pod of the replica, or of one PodClique, in a stable order."""
        chosen = self.pod_cliques if pod_clique is None else (self.pod_clique(pod_clique),)
        return tuple(_pod_plan(self, pclq, index) for pclq in chosen for index in range(pclq.replicas))

    # --- other views ---
    def topology(self) -> ReplicaTopology:
        """What the health and termination decisions need (grove.topology)."""
        return ReplicaTopology(
            pcs=self.pcs,
            replica=self.replica,
            cliques=tuple(
                CliqueUnit(
                    name=p.name,
                    clique=p.clique,
                    replicas=p.replicas,
                    min_available=p.min_available,
                    scaling_group=p.scaling_group.name if p.scaling_group else None,
                    scaling_group_replica=p.scaling_group.replica_index if p.scaling_group else None,
                    starts_after=p.starts_after,
                )
                for p in self.pod_cliques
            ),
            scaling_groups=tuple(
                ScalingGroupUnit(
                    name=g.name,
                    config_name=g.config_name,
                    replicas=g.replicas,
                    min_available=g.min_available,
                    termination_delay=g.termination_delay,
                )
                for g in self.scaling_groups
            ),
            termination_delay=self.termination_delay,
        )

    def summary(self) -> dict[str, Any]:
        """This replica in the `plan -o json` shape (docs/operations.md)."""
        return {
            "index": self.replica,
            "headlessService": self.service.name,
            "podCliqueScalingGroups": [
                {
                    "name": g.name,
                    "replicas": g.replicas,
                    "minAvailable": g.min_available,
                    "cliqueNames": list(g.clique_names),
                    "terminationDelay": _duration_text(self.effective_delay(g.name)),
                }
                for g in self.scaling_groups
            ],
            "podCliques": [
                {
                    "name": p.name,
                    "clique": p.clique,
                    "replicas": p.replicas,
                    "minAvailable": p.min_available,
                    "podGang": p.pod_gang,
                    "scalingGroup": _ref_summary(p.scaling_group),
                    "podNames": list(p.pod_names),
                }
                for p in self.pod_cliques
            ],
            "podGangs": [
                {
                    "name": g.name,
                    "base": g.base,
                    "scalingGroup": _ref_summary(g.scaling_group),
                    "podGroups": [{"name": pg.name, "minReplicas": pg.min_replicas} for pg in g.pod_groups],
                }
                for g in self.pod_gangs
            ],
        }


# --- Planning ----------------------------------------------------------------------------------------------
def plan_replica(pcs: PodCliqueSet, replica: int, counts: ObservedCounts | None = None) -> ReplicaPlan:
    """The expected objects of replica `replica`. Raises InvalidPodCliqueSet when the PCS does not validate.

    Any replica index >= 0 may be planned, also one above spec.replicas (to know what to delete on scale-in).
    `counts` are the replica counts stored on the live PCSG and PodClique objects, which win over the template's
    (grove.scale); without them the plan is the one of a freshly created replica.
    """
    problems = validate_pcs(pcs)
    if problems:
        raise InvalidPodCliqueSet(problems)
    return plan_validated(pcs, replica, counts)


def plan_validated(pcs: PodCliqueSet, replica: int, counts: ObservedCounts | None = None) -> ReplicaPlan:
    """plan_replica of a PCS its caller has just validated (validation is most of planning's cost)."""
    if replica < 0:
        raise ValueError(f"replica index must be >= 0, got {replica}")
    return _Planner(defaulted(pcs), replica, counts or ObservedCounts()).plan()


def plan_replicas(pcs: PodCliqueSet) -> list[ReplicaPlan]:
    return [plan_replica(pcs, index) for index in range(pcs.spec.replicas)]


def topology_for(pcs: PodCliqueSet, replica: int) -> ReplicaTopology:
    return plan_replica(pcs, replica).topology()


def plan_document(pcs: PodCliqueSet, replicas: list[int] | None = None) -> dict[str, Any]:
    """The whole `plan -o json` document: the given replica indices, or all of spec.replicas."""
    indices = range(pcs.spec.replicas) if replicas is None else replicas
    plans = [plan_replica(pcs, index) for index in indices]
    template = pcs.spec.template
    return {
        "podCliqueSet": pcs.name,
        "namespace": pcs.namespace,
        "terminationDelay": _duration_text(template.termination_delay),
        "scaledReleaseAfter": scaled_release_after(pcs),
        "replicas": [plan.summary() for plan in plans],
    }


def scaled_release_after(pcs: PodCliqueSet) -> ReleaseAfter:
    """DESIGN §4.3: scaled gangs are released once the base gang is Scheduled, or Ready if the PCS asks for it."""
    value = (pcs.metadata.annotations or {}).get(names.ANNOTATION_SCALED_RELEASE_AFTER)
    return "Ready" if value == names.RELEASE_AFTER_READY else "Scheduled"


class _Planner:
    """Builds one ReplicaPlan from a validated, defaulted PCS."""

    def __init__(self, pcs: PodCliqueSet, replica: int, counts: ObservedCounts) -> None:
        self.pcs = pcs
        self.counts = counts
        self.replica = replica
        self.name = pcs.name
        self.base_gang = names.base_podgang_name(self.name, replica)
        self.cliques = {c.name: c for c in pcs.spec.template.cliques}
        self.grouped = {n for g in pcs.spec.template.pod_clique_scaling_groups for n in g.clique_names}

    def common_labels(self, object_name: str, component: str) -> dict[str, str]:
        return {
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
            names.LABEL_PART_OF: self.name,
            names.LABEL_NAME: object_name,
            names.LABEL_COMPONENT: component,
            names.LABEL_PCS_REPLICA_INDEX: str(self.replica),
        }

    def plan(self) -> ReplicaPlan:
        standalone = [
            self.standalone_pclq(c) for c in self.pcs.spec.template.cliques if c.name not in self.grouped
        ]
        groups = [self.scaling_group(g) for g in self.pcs.spec.template.pod_clique_scaling_groups]
        grouped = [
            pclq for g in self.pcs.spec.template.pod_clique_scaling_groups for pclq in self.grouped_pclqs(g)
        ]
        pod_cliques = self.with_startup_order(standalone + grouped)
        gangs = [self.gang(self.base_gang, [p for p in pod_cliques if p.base], None)]
        for group in groups:
            for j in range(group.min_available, group.replicas):
                ref = ScalingGroupRef(name=group.name, replica_index=j)
                name = names.scaled_podgang_name(group.name, j - group.min_available)
                gangs.append(self.gang(name, [p for p in pod_cliques if p.scaling_group == ref], ref))
        service_name = names.headless_service_name(self.name, self.replica)
        headless = self.pcs.spec.template.headless_service_config
        return ReplicaPlan(
            pcs=self.name,
            namespace=self.pcs.namespace,
            replica=self.replica,
            pod_cliques=tuple(pod_cliques),
            scaling_groups=tuple(groups),
            pod_gangs=tuple(gangs),
            service=ServicePlan(
                name=service_name,
                labels=self.common_labels(service_name, names.COMPONENT_HEADLESS_SERVICE),
                selector={
                    names.LABEL_MANAGED_BY: names.MANAGED_BY,
                    names.LABEL_PART_OF: self.name,
                    names.LABEL_PCS_REPLICA_INDEX: str(self.replica),
                },
                publish_not_ready_addresses=headless.publish_not_ready_addresses if headless else True,
            ),
            termination_delay=self.pcs.spec.template.termination_delay,
            scaled_release_after=scaled_release_after(self.pcs),
            priority_class_name=self.pcs.spec.template.priority_class_name or None,
        )

    def with_startup_order(self, pod_cliques: list[PodCliquePlan]) -> list[PodCliquePlan]:
        dependencies = clique_dependencies(self.pcs)
        if not dependencies:
            return pod_cliques
        resolved = resolve(dependencies, [PodCliqueRef(name=p.name, clique=p.clique, pod_gang=p.pod_gang)
                                          for p in pod_cliques])
        return [p.model_copy(update={"starts_after": resolved[p.name]}) if p.name in resolved else p
                for p in pod_cliques]

    def standalone_pclq(self, clique: PodCliqueTemplateSpec) -> PodCliquePlan:
        name = names.pclq_name(self.name, self.replica, clique.name)
        labels = {
            **(clique.labels or {}),
            **self.common_labels(name, names.COMPONENT_PCS_PODCLIQUE),
            names.LABEL_PODGANG: self.base_gang,
        }
        return self.pclq(name, clique, self.base_gang, None, labels)

    def grouped_pclqs(self, group: PodCliqueScalingGroupConfig) -> list[PodCliquePlan]:
        pcsg = names.pcsg_name(self.name, self.replica, group.name)
        replicas, min_available = self.group_counts(group)
        result = []
        for j in range(replicas):
            ref = ScalingGroupRef(name=pcsg, replica_index=j)
            gang = names.podgang_of(self.name, self.replica, pcsg, j, min_available)
            base = gang == self.base_gang
            for clique_name in group.clique_names:
                clique = self.cliques[clique_name]
                name = names.pcsg_pclq_name(pcsg, j, clique_name)
                labels = {
                    **(clique.labels or {}),
                    **self.common_labels(name, names.COMPONENT_PCSG_PODCLIQUE),
                    names.LABEL_PODGANG: gang,
                    names.LABEL_PCSG: pcsg,
                    names.LABEL_PCSG_REPLICA_INDEX: str(j),
                }
                if not base:
                    labels[names.LABEL_BASE_PODGANG] = self.base_gang
                result.append(self.pclq(name, clique, gang, ref, labels))
        return result

    def pclq(
        self,
        name: str,
        clique: PodCliqueTemplateSpec,
        gang: str,
        ref: ScalingGroupRef | None,
        labels: dict[str, str],
    ) -> PodCliquePlan:
        min_available = clique.spec.min_available
        assert min_available is not None  # defaulted
        return PodCliquePlan(
            name=name,
            clique=clique.name,
            replicas=self.counts.pod_clique(name, clique.spec.replicas, min_available, most_pods(name)),
            min_available=min_available,
            pod_gang=gang,
            base=gang == self.base_gang,
            scaling_group=ref,
            labels=labels,
            pod_template_hash=pod_template_hash(self.pcs, clique),
        )

    def scaling_group(self, group: PodCliqueScalingGroupConfig) -> ScalingGroupPlan:
        name = names.pcsg_name(self.name, self.replica, group.name)
        replicas, min_available = self.group_counts(group)
        return ScalingGroupPlan(
            name=name,
            config_name=group.name,
            replicas=replicas,
            min_available=min_available,
            clique_names=tuple(group.clique_names),
            termination_delay=group.termination_delay,
            labels=self.common_labels(name, names.COMPONENT_PCSG),
        )

    def group_counts(self, group: PodCliqueScalingGroupConfig) -> tuple[int, int]:
        """(replicas, minAvailable) of a scaling group: replicas as stored on the PCSG object once it exists."""
        template, min_available = _group_counts(group)
        name = names.pcsg_name(self.name, self.replica, group.name)
        most = most_scaling_group_replicas(name, {c: self.cliques[c].spec.replicas for c in group.clique_names
                                                  if c in self.cliques})
        return self.counts.scaling_group(name, template, min_available, most), min_available

    def gang(self, name: str, members: list[PodCliquePlan], ref: ScalingGroupRef | None) -> PodGangPlan:
        labels = self.common_labels(name, names.COMPONENT_PODGANG)
        if ref is not None:
            labels[names.LABEL_BASE_PODGANG] = self.base_gang
            labels[names.LABEL_PCSG] = ref.name
            labels[names.LABEL_PCSG_REPLICA_INDEX] = str(ref.replica_index)
        return PodGangPlan(
            name=name,
            base=ref is None,
            pod_groups=tuple(
                PodGroupPlan(name=p.name, min_replicas=p.min_available, pod_names=p.pod_names)
                for p in members
            ),
            scaling_group=ref,
            labels=labels,
        )


def _pod_plan(plan: ReplicaPlan, pclq: PodCliquePlan, index: int) -> PodPlan:
    name = names.pod_name(pclq.name, index)
    env = {
        names.ENV_PCS_NAME: plan.pcs,
        names.ENV_PCS_INDEX: str(plan.replica),
        names.ENV_PCLQ_NAME: pclq.name,
        names.ENV_HEADLESS_SERVICE: names.headless_service_address(plan.pcs, plan.replica, plan.namespace),
        names.ENV_PCLQ_POD_INDEX: str(index),
    }
    if pclq.scaling_group is not None:
        group = plan.scaling_group(pclq.scaling_group.name)
        env[names.ENV_PCSG_NAME] = group.name
        env[names.ENV_PCSG_INDEX] = str(pclq.scaling_group.replica_index)
        members = plan.members(group.name, pclq.scaling_group.replica_index)
        env[names.ENV_PCSG_TEMPLATE_NUM_PODS] = str(sum(m.replicas for m in members))
    return PodPlan(
        name=name,
        pod_clique=pclq.name,
        clique=pclq.clique,
        index=index,
        pod_gang=pclq.pod_gang,
        base=pclq.base,
        subdomain=plan.service.name,
        labels={**pclq.labels, names.LABEL_PODCLIQUE: pclq.name, names.LABEL_POD_INDEX: str(index),
                names.LABEL_POD_TEMPLATE_HASH: pclq.pod_template_hash},
        env=env,
    )


def _group_counts(group: PodCliqueScalingGroupConfig) -> tuple[int, int]:
    replicas = 1 if group.replicas is None else group.replicas
    min_available = 1 if group.min_available is None else group.min_available
    return replicas, min_available


def _find(items: tuple[Any, ...], name: str, kind: str) -> Any:
    for item in items:
        if item.name == name:
            return item
    raise KeyError(f"no {kind} named {name!r} in this replica")


def _ref_summary(ref: ScalingGroupRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"name": ref.name, "replicaIndex": ref.replica_index}


def _duration_text(value: timedelta | None) -> str | None:
    return None if value is None else format_duration(value)
