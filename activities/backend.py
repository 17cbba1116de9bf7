"""Which gang scheduler places a replica's pods (DESIGN §4b, grove/scheduling.py): what the worker found at
start-up, and the backend each PodCliqueSet gets (its annotation, else the worker's default)."""

from __future__ import annotations

from dataclasses import dataclass

from activities.kubeapi import NATIVE_PODGROUPS, Kube
from grove import names
from grove.models import PodCliqueSet
from grove.scheduling import chosen_backend

AUTO = "auto"
REQUESTS = (AUTO, *names.BACKEND_VALUES)  # what --scheduler-backend / GROVE_TEMPORAL_SCHEDULER_BACKEND accept


class BackendUnavailable(ValueError):
    """The backend asked for cannot work on this cluster."""


@dataclass(frozen=True)
class Scheduling:
    default: str = names.BACKEND_NONE  # for PodCliqueSets without the annotation
    native_served: bool = False  # the cluster serves scheduling.k8s.io/v1alpha2 podgroups
    reason: str = "not detected"  # how the default was chosen (start-up log, /readyz)

    def backend_for(self, pcs: PodCliqueSet) -> str:
        return chosen_backend(pcs, self.default)

    def problem(self, backend: str) -> str | None:
        """Why `backend` cannot place pods on this cluster; None when it can."""
        if backend == names.BACKEND_KUBE and not self.native_served:
            return (f"metadata.annotations[{names.ANNOTATION_SCHEDULER_BACKEND}]: kube needs the PodGroup API "
                    f"({NATIVE_PODGROUPS.api_version} podgroups), which this cluster does not serve (kube-apiserver "
                    "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha2=true)")
        return None

    def describe(self) -> str:
        return f"{self.default} ({self.reason})"


def detect(kube: Kube, requested: str) -> Scheduling:
    """Ask the cluster (discovery) whether it serves native PodGroups and settle the worker's default backend.

    `auto` picks `kube` where the API is served, else `none`. An explicit `kube` on a cluster without it raises
    BackendUnavailable: pods would lose their gang silently (the apiserver drops spec.schedulingGroup when the
    feature is off). Whether kube-scheduler runs with GangScheduling cannot be seen from the API."""
    if requested not in REQUESTS:
        raise BackendUnavailable(f"--scheduler-backend: must be {', '.join(REQUESTS)}, got {requested!r}")
    served = NATIVE_PODGROUPS.plural in kube.api_resources(NATIVE_PODGROUPS.api_version)
    api = f"{NATIVE_PODGROUPS.api_version} {NATIVE_PODGROUPS.plural}"
    if requested == AUTO:
        if served:
            return Scheduling(names.BACKEND_KUBE, True, f"auto: the cluster serves {api}")
        return Scheduling(names.BACKEND_NONE, False, f"auto: the cluster does not serve {api}")
    if requested == names.BACKEND_KUBE and not served:
        raise BackendUnavailable(
            f"--scheduler-backend=kube: the cluster does not serve {api}; enable kube-apiserver "
            "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha2=true (and "
            "kube-scheduler --feature-gates=GenericWorkload=true,GangScheduling=true), or choose kai or none")
    return Scheduling(requested, served, "configured")
