"""Every name, label, annotation, environment variable and condition string of the project, in one place.

Object names follow Grove's namegen so that Grove tooling and KAI keep working (DESIGN §3). For PCS `p`,
replica `i`, scaling group config `sg` and scaling group replica `j`:

    standalone PodClique      p-i-<clique>
    PodCliqueScalingGroup     p-i-sg
    PCSG-owned PodClique      p-i-sg-j-<clique>
    base PodGang              p-i
    scaled PodGang            p-i-sg-k        k = j - minAvailable (0-based, seed 003)
    Pod (= hostname)          <podclique>-<pod index>
    headless Service          p-i             (pods use it as subdomain)
"""

from __future__ import annotations

from typing import Final

# --- API groups and kinds ----------------------------------------------------------------------------------
GROVE_GROUP = "grove.io"
GROVE_VERSION = "v1alpha1"
GROVE_API_VERSION: Final = "grove.io/v1alpha1"
SCHEDULER_GROUP = "scheduler.grove.io"
SCHEDULER_VERSION = "v1alpha1"
SCHEDULER_API_VERSION: Final = "scheduler.grove.io/v1alpha1"
KAI_GROUP = "scheduling.run.ai"
KAI_VERSION = "v2alpha2"
KAI_API_VERSION: Final = "scheduling.run.ai/v2alpha2"
# Kubernetes' own gang scheduling (KEP-4671): PodGroup objects, served with the GenericWorkload feature gate.
NATIVE_SCHEDULING_GROUP = "scheduling.k8s.io"
NATIVE_SCHEDULING_VERSION = "v1alpha2"
NATIVE_SCHEDULING_API_VERSION: Final = "scheduling.k8s.io/v1alpha2"

KIND_PODCLIQUESET: Final = "PodCliqueSet"
KIND_PODCLIQUE: Final = "PodClique"
KIND_PODCLIQUESCALINGGROUP: Final = "PodCliqueScalingGroup"
KIND_PODGANG: Final = "PodGang"
KIND_KAI_PODGROUP: Final = "PodGroup"
KIND_NATIVE_PODGROUP: Final = "PodGroup"  # scheduling.k8s.io

# --- Labels (keys as Grove spells them) --------------------------------------------------------------------
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_NAME = "app.kubernetes.io/name"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PCS_REPLICA_INDEX = "grove.io/podcliqueset-replica-index"
LABEL_PODCLIQUE = "grove.io/podclique"
LABEL_PODGANG = "grove.io/podgang"
LABEL_BASE_PODGANG = "grove.io/base-podgang"
LABEL_PCSG = "grove.io/podcliquescalinggroup"
LABEL_PCSG_REPLICA_INDEX = "grove.io/podcliquescalinggroup-replica-index"
LABEL_POD_INDEX = "grove.io/podclique-pod-index"
# The hash of the pod template a pod was created from (grove.rollout.pod_template_hash), as Grove labels pods.
LABEL_POD_TEMPLATE_HASH = "grove.io/pod-template-hash"

# Our value for app.kubernetes.io/managed-by: objects carrying it are ours to change or delete.
MANAGED_BY = "grove-temporal"
# The Grove operator's (ai-dynamo/grove operator/api/common: LabelManagedByValue, FinalizerPodCliqueSet). A PCS whose
# objects carry it, or that carries its finalizer, is driven by Grove's operator: we hold it (docs/operations.md: running beside
# the Grove operator).
GROVE_OPERATOR_MANAGED_BY = "grove-operator"
GROVE_OPERATOR_PCS_FINALIZER = "grove.io/podcliqueset.grove.io"

COMPONENT_PCS_PODCLIQUE = "pcs-podclique"
COMPONENT_PCSG_PODCLIQUE = "pcsg-podclique"
COMPONENT_PCSG = "pcs-podcliquescalinggroup"
COMPONENT_PODGANG = "podgang"
COMPONENT_HEADLESS_SERVICE = "pcs-headless-service"
COMPONENT_NATIVE_PODGROUP = "native-podgroup"
COMPONENT_HPA = "pcs-hpa"  # Grove's LabelComponentNameHorizontalPodAutoscaler

# --- HorizontalPodAutoscaler (DESIGN §4.10): one per autoscaled PodClique / PCSG, named after its target --------
HPA_API_VERSION: Final = "autoscaling/v2"
KIND_HPA: Final = "HorizontalPodAutoscaler"

# --- Annotations -------------------------------------------------------------------------------------------
# When scaled PodGangs may be released: after the base gang is Scheduled (default) or Ready (DESIGN §4.3).
ANNOTATION_SCALED_RELEASE_AFTER = "grove-temporal.io/scaled-release-after"
RELEASE_AFTER_SCHEDULED = "Scheduled"
RELEASE_AFTER_READY = "Ready"
RELEASE_AFTER_VALUES = (RELEASE_AFTER_SCHEDULED, RELEASE_AFTER_READY)
# Which gang scheduler places this PCS's pods, overriding the worker's --scheduler-backend (DESIGN §4b).
ANNOTATION_SCHEDULER_BACKEND = "grove-temporal.io/scheduler-backend"
BACKEND_KUBE = "kube"  # Kubernetes' own PodGroups (scheduling.k8s.io/v1alpha2, gang policy)
BACKEND_KAI = "kai"  # KAI scheduler: pods carry its schedulerName, KAI reads the Grove PodGangs
BACKEND_NONE = "none"  # scheduling gates only; the default scheduler places pods one by one
BACKEND_VALUES = (BACKEND_KUBE, BACKEND_KAI, BACKEND_NONE)
KAI_SCHEDULER_NAME = "kai-scheduler"

# Startup order (DESIGN §4.10): a pod of a clique that starts after others is created with ANNOTATION_STARTUP =
# STARTUP_WAITING and an init container that waits (reading its own annotations through the downward API) until the
# workflow sets STARTUP_RELEASED, once every pod of the cliques it starts after is Ready. ANNOTATION_STARTS_AFTER
# lists those PodCliques, for people and tools.
ANNOTATION_STARTUP = "grove-temporal.io/startup"
ANNOTATION_STARTS_AFTER = "grove-temporal.io/starts-after"
STARTUP_WAITING = "Waiting"
STARTUP_RELEASED = "Released"
# The image of the waiting init container (anything with `sh`, `grep` and `sleep`); a PCS annotation overrides it.
ANNOTATION_STARTUP_WAIT_IMAGE = "grove-temporal.io/startup-wait-image"
DEFAULT_STARTUP_WAIT_IMAGE = "busybox:1.36"
STARTUP_WAIT_CONTAINER = "grove-temporal-startup-wait"
STARTUP_PODINFO_VOLUME = "grove-temporal-podinfo"
STARTUP_PODINFO_PATH = "/var/run/grove-temporal/podinfo"

# --- Clique startup types (Grove's spec.template.cliqueStartupType) -----------------------------------------
STARTUP_ANY_ORDER = "CliqueStartupTypeAnyOrder"
STARTUP_IN_ORDER = "CliqueStartupTypeInOrder"
STARTUP_EXPLICIT = "CliqueStartupTypeExplicit"
STARTUP_TYPES = (STARTUP_ANY_ORDER, STARTUP_IN_ORDER, STARTUP_EXPLICIT)

# --- Scheduling gate ---------------------------------------------------------------------------------------
SCHEDULING_GATE = "grove.io/podgang-pending-creation"

# --- Pod environment variables -----------------------------------------------------------------------------
ENV_PCS_NAME = "GROVE_PCS_NAME"
ENV_PCS_INDEX = "GROVE_PCS_INDEX"
ENV_PCLQ_NAME = "GROVE_PCLQ_NAME"
ENV_HEADLESS_SERVICE = "GROVE_HEADLESS_SERVICE"
ENV_PCLQ_POD_INDEX = "GROVE_PCLQ_POD_INDEX"
ENV_PCSG_NAME = "GROVE_PCSG_NAME"
ENV_PCSG_INDEX = "GROVE_PCSG_INDEX"
ENV_PCSG_TEMPLATE_NUM_PODS = "GROVE_PCSG_TEMPLATE_NUM_PODS"

# --- Conditions (types and reasons as Grove spells them) ---------------------------------------------------
CONDITION_MIN_AVAILABLE_BREACHED = "MinAvailableBreached"
CONDITION_PODCLIQUE_SCHEDULED = "PodCliqueScheduled"
REASON_SUFFICIENT_READY_PODS = "SufficientReadyPods"
REASON_INSUFFICIENT_READY_PODS = "InsufficientReadyPods"
REASON_NEVER_AVAILABLE = "NeverAvailable"
REASON_UPDATE_IN_PROGRESS = "UpdateInProgress"
REASON_SUFFICIENT_SCHEDULED_PODS = "SufficientScheduledPods"
REASON_INSUFFICIENT_SCHEDULED_PODS = "InsufficientScheduledPods"
REASON_SUFFICIENT_AVAILABLE_PCSG_REPLICAS = "SufficientAvailablePodCliqueScalingGroupReplicas"
REASON_INSUFFICIENT_AVAILABLE_PCSG_REPLICAS = "InsufficientAvailablePodCliqueScalingGroupReplicas"
# Ours: whether the PodCliqueSet passed validation (DESIGN §4.1, §4.8).
CONDITION_SPEC_VALID = "SpecValid"
# Ours: Grove fields in the spec that grove-temporal does not implement (DESIGN §4.10: never silently ignored).
CONDITION_UNSUPPORTED_FIELDS = "UnsupportedFields"
REASON_UNSUPPORTED_FIELDS = "FieldsNotImplemented"
REASON_ALL_FIELDS_SUPPORTED = "AllFieldsSupported"
REASON_VALID = "Valid"
REASON_INVALID = "Invalid"

# --- Rolling updates (DESIGN §4.9; Grove's spec.updateStrategy) ---------------------------------------------
STRATEGY_ROLLING_RECREATE = "RollingRecreate"
STRATEGY_ON_DELETE = "OnDelete"
UPDATE_STRATEGIES = (STRATEGY_ROLLING_RECREATE, STRATEGY_ON_DELETE)
DEFAULT_MAX_UNAVAILABLE = 1
CONDITION_UPDATE_IN_PROGRESS = "UpdateInProgress"
REASON_UPDATING = "Updating"
REASON_UPDATE_COMPLETE = "UpdateComplete"
REASON_UPDATE_PAUSED = "UpdatePaused"
REASON_PROGRESS_DEADLINE_EXCEEDED = "ProgressDeadlineExceeded"
EVENT_ROLLOUT_STARTED = "RolloutStarted"
EVENT_ROLLOUT_STEP = "RollingRecreate"
EVENT_ROLLOUT_COMPLETED = "RolloutCompleted"
EVENT_ROLLOUT_HALTED = "ProgressDeadlineExceeded"

MAX_NAME_LENGTH = 63
MAX_LABEL_VALUE_LENGTH = 63  # Kubernetes label values, e.g. app.kubernetes.io/part-of=<pcs>
DEFAULT_NAMESPACE = "default"


# --- Object names ------------------------------------------------------------------------------------------
def replica_prefix(pcs: str, replica: int) -> str:
    """`p-i`: the base PodGang, the headless Service and the prefix of every object of the replica."""
    return f"{pcs}-{replica}"


def pclq_name(pcs: str, replica: int, clique: str) -> str:
    """A standalone PodClique."""
    return f"{replica_prefix(pcs, replica)}-{clique}"


def pcsg_name(pcs: str, replica: int, scaling_group: str) -> str:
    return f"{replica_prefix(pcs, replica)}-{scaling_group}"


def pcsg_replica_name(pcsg: str, pcsg_replica: int) -> str:
    """`p-i-sg-j`: the prefix of one scaling group replica's PodCliques (also its gang-tree node name)."""
    return f"{pcsg}-{pcsg_replica}"


def pcsg_pclq_name(pcsg: str, pcsg_replica: int, clique: str) -> str:
    """A PodClique owned by a scaling group: `p-i-sg-j-<clique>`."""
    return f"{pcsg_replica_name(pcsg, pcsg_replica)}-{clique}"


def base_podgang_name(pcs: str, replica: int) -> str:
    return replica_prefix(pcs, replica)


def scaled_podgang_name(pcsg: str, scaled_index: int) -> str:
    """Scaled PodGang number k (0-based) holds scaling group replica minAvailable + k (seed 003)."""
    return f"{pcsg}-{scaled_index}"


def podgang_of(pcs: str, replica: int, pcsg: str | None = None, pcsg_replica: int | None = None,
               min_available: int = 0) -> str:
    """The PodGang a PodClique belongs to (seed 003), the one rule for gang membership: the base gang holds every
    standalone PodClique and those of scaling group replicas 0 .. minAvailable-1; replica j >= minAvailable is
    alone in scaled gang j - minAvailable."""
    if pcsg is None or pcsg_replica is None or pcsg_replica < min_available:
        return base_podgang_name(pcs, replica)
    return scaled_podgang_name(pcsg, pcsg_replica - min_available)


def pod_name(pclq: str, pod_index: int) -> str:
    """Pod name and hostname: deterministic, so that creating it twice is harmless."""
    return f"{pclq}-{pod_index}"


def headless_service_name(pcs: str, replica: int) -> str:
    return replica_prefix(pcs, replica)


def headless_service_address(pcs: str, replica: int, namespace: str) -> str:
    return f"{headless_service_name(pcs, replica)}.{namespace}.svc.cluster.local"


# --- label selectors (the one place they are spelled) ---------------------------------------------------------------
def managed_selector() -> str:
    """Everything grove-temporal manages."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY}"


def pcs_selector(pcs: str) -> str:
    """Everything grove-temporal manages for one PodCliqueSet."""
    return f"{managed_selector()},{LABEL_PART_OF}={pcs}"


def replica_selector(pcs: str, replica: int) -> str:
    """Everything grove-temporal manages for one PodCliqueSet replica."""
    return f"{pcs_selector(pcs)},{LABEL_PCS_REPLICA_INDEX}={replica}"


def grove_operator_selector() -> str:
    """Everything the Grove operator manages (the one-controller rule, grove/controllers.py)."""
    return f"{LABEL_MANAGED_BY}={GROVE_OPERATOR_MANAGED_BY}"


def replica_selector_with_other_controllers(pcs: str, replica: int) -> str:
    """The replica's objects, ours and the Grove operator's (the one-controller rule, grove/controllers.py)."""
    return (f"{LABEL_MANAGED_BY} in ({MANAGED_BY},{GROVE_OPERATOR_MANAGED_BY}),{LABEL_PART_OF}={pcs},"
            f"{LABEL_PCS_REPLICA_INDEX}={replica}")


def native_podgroup_name(pod_gang: str, pod_gang_uid: str) -> str:
    """The Kubernetes PodGroup of one PodGang incarnation: `<podgang>-<first 8 characters of its UID>`.

    The UID part matters: a PodGroup outlives its PodGang while pods still reference it (the PodGroupProtection
    finalizer), so a gang recreated under the same name after a termination must not meet its predecessor's group."""
    return f"{pod_gang}-{pod_gang_uid.replace('-', '')[:8]}"


def hpa_name(target: str) -> str:
    """A HorizontalPodAutoscaler is named after the PodClique or PodCliqueScalingGroup it scales (as Grove does)."""
    return target
