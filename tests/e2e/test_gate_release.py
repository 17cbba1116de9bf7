"""S1 and S2: base gangs released as soon as referenced; scaled gangs only after the base gang is scheduled.
The scenario bodies live in tests/e2e/scenarios.py (test_rbac.py runs them again under deploy/'s ServiceAccount)."""

from __future__ import annotations

from temporalio.client import Client

from tests.e2e import scenarios
from tests.e2e.conftest import Histories
from tests.e2e.harness import Cluster, Timeline, WorkerProcess, describe, wait_for


async def test_standalone_cliques_form_the_base_gang(cluster: Cluster, worker_process: WorkerProcess,
                                                        temporal_client: Client, histories: Histories) -> None:
    handle = await scenarios.s1_standalone_cliques_form_the_base_gang(cluster, temporal_client)
    await histories.keep(handle, "s1_start_to_available")


async def test_scaled_gangs_wait_for_the_base_gang(cluster: Cluster, worker_process: WorkerProcess,
                                                      timeline: Timeline) -> None:
    scenarios.s2_scaled_gangs_wait_for_the_base_gang(cluster)
    # The order as the pod watch delivered it (one stream, in resourceVersion order, millisecond clock): every
    # scaled pod lost our gate only after the last base pod was scheduled.
    by_gang: dict[bool, list[str]] = {True: [], False: []}
    for pod in cluster.pods():
        by_gang[pod["metadata"]["labels"]["grove.io/podgang"] == "p-0"].append(pod["metadata"]["name"])
    base_scheduled = max(timeline.of("Pod", name)[0]["scheduled"] for name in by_gang[True])
    released = [timeline.of("Pod", name)[0]["ungated"] for name in by_gang[False]]
    assert len(released) == 6 and min(released) > base_scheduled
    print(f"\nS2 scaled pods released {describe([r - base_scheduled for r in released])} after the base gang "
          "was scheduled")
    # The PCS status mirror counts the replica as available (standalone cliques and PCSG minAvailable met).
    wait_for(lambda: ((cluster.pcs("p") or {}).get("status") or {}).get("availableReplicas") == 1, timeout=20,
             what="PodCliqueSet status.availableReplicas == 1")


async def test_scaled_pods_stay_gated_while_the_base_gang_cannot_be_scheduled(
        cluster: Cluster, worker_process: WorkerProcess) -> None:
    scenarios.s2_scaled_pods_stay_gated_while_the_base_gang_cannot_be_scheduled(cluster)
