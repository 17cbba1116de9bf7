"""Object names follow Grove's namegen (DESIGN §3)."""

from __future__ import annotations

from grove import names


def test_object_names() -> None:
    assert names.pclq_name("p", 2, "frontend") == "p-2-frontend"
    assert names.pcsg_name("p", 2, "sg") == "p-2-sg"
    assert names.pcsg_pclq_name("p-2-sg", 3, "worker") == "p-2-sg-3-worker"
    assert names.pcsg_replica_name("p-2-sg", 3) == "p-2-sg-3"
    assert names.base_podgang_name("p", 2) == "p-2"
    assert names.scaled_podgang_name("p-2-sg", 0) == "p-2-sg-0"
    assert names.pod_name("p-2-frontend", 7) == "p-2-frontend-7"
    assert names.headless_service_name("p", 2) == "p-2"
    assert names.headless_service_address("p", 2, "ns") == "p-2.ns.svc.cluster.local"


def test_label_keys_and_values_are_groves() -> None:
    assert names.LABEL_PCS_REPLICA_INDEX == "grove.io/podcliqueset-replica-index"
    assert names.LABEL_PCSG_REPLICA_INDEX == "grove.io/podcliquescalinggroup-replica-index"
    assert names.LABEL_POD_INDEX == "grove.io/podclique-pod-index"
    assert names.SCHEDULING_GATE == "grove.io/podgang-pending-creation"
    assert names.MANAGED_BY == "grove-temporal"
    groups = [
        (names.GROVE_API_VERSION, names.GROVE_GROUP, names.GROVE_VERSION),
        (names.SCHEDULER_API_VERSION, names.SCHEDULER_GROUP, names.SCHEDULER_VERSION),
        (names.KAI_API_VERSION, names.KAI_GROUP, names.KAI_VERSION),
    ]
    assert [api_version.split("/") for api_version, _, _ in groups] == [[g, v] for _, g, v in groups]
    assert names.KAI_API_VERSION == "scheduling.run.ai/v2alpha2"
