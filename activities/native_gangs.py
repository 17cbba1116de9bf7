"""The `kube` scheduler backend while materialising a replica: one Kubernetes PodGroup (gang policy) per PodGang
incarnation, created after its PodGang and before its pods; pods placed for their backend (grove/scheduling.py).

Native PodGroups are never deleted here: each is owned by its PodGang and goes with it (garbage collector), and
kube-controller-manager's PodGroupProtection keeps it while pods still reference it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from activities.kubeapi import JSON, NATIVE_PODGROUPS, Kube, KubeError, name_of, terminating, uid_of
from grove import names
from grove.plan import PodCliquePlan, ReplicaPlan
from grove.scheduling import is_required, native_gang, native_podgroup_manifest, place_pod


class NativeGangs:
    """The native PodGroups of one replica during one ensure pass."""

    def __init__(self, kube: Kube, plan: ReplicaPlan, backend: str, selector: str) -> None:
        self.kube = kube
        self.plan = plan
        self.backend = backend
        self.selector = selector
        self.ready: dict[str, str] = {}  # PodGang name -> the name of its live native PodGroup

    def ensure(self, gangs: Mapping[str, JSON], new_gangs: Collection[str] = ()) -> list[str]:
        """Create the missing native PodGroups of the live PodGangs in `gangs`; what was created, as Kind/name.

        `new_gangs`: PodGangs this pass created. A PodGroup's name carries its PodGang's UID, so none can exist yet
        for those: when every gang is new (a replica's first pass) nothing is listed (issue 17: one request less)."""
        if self.backend != names.BACKEND_KUBE:
            return []
        live = [g.name for g in self.plan.pod_gangs if g.name in gangs]
        existing = ({} if live and set(live) <= set(new_gangs) else
                    {name_of(g): g for g in self.kube.list_items(NATIVE_PODGROUPS, self.plan.namespace,
                                                                  label_selector=self.selector)})
        created: list[str] = []
        for gang in self.plan.pod_gangs:
            gang_obj = gangs.get(gang.name)
            if gang_obj is None or terminating(gang_obj) or not uid_of(gang_obj):
                continue  # a gang that is going: its pods wait for the next incarnation
            wanted = native_gang(self.plan, gang)
            body = native_podgroup_manifest(wanted, self.plan.namespace, uid_of(gang_obj))
            name = body["metadata"]["name"]
            current = existing.get(name)
            if current is not None:
                if not terminating(current):
                    self.ready[gang.name] = name
                continue
            try:
                self.kube.create(NATIVE_PODGROUPS, self.plan.namespace, body)
                created.append(f"{names.KIND_NATIVE_PODGROUP}/{name}")
            except KubeError as exc:
                if not exc.conflict:  # created meanwhile (a retried activity): fine
                    raise
            self.ready[gang.name] = name
        return created

    def place(self, body: JSON, pod_clique: PodCliquePlan, index: int) -> JSON | None:
        """The pod manifest for this replica's backend; None when the pod must wait (its gang's native PodGroup
        does not exist yet: spec.schedulingGroup cannot be added later)."""
        if self.backend != names.BACKEND_KUBE:
            return place_pod(body, self.backend)
        if not is_required(self.plan, pod_clique.name, index):
            return body  # surplus: scheduled on its own once its gang is (activities/observe.snapshot holds its gate)
        podgroup = self.ready.get(pod_clique.pod_gang)
        return None if podgroup is None else place_pod(body, self.backend, podgroup)
