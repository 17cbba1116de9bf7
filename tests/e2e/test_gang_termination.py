"""S3: a standalone PodClique breached past terminationDelay gang-terminates its whole PCS replica, which is then
recreated; the other replicas are untouched. The body lives in tests/e2e/scenarios.py (shared with test_rbac.py)."""

from __future__ import annotations

from temporalio.client import Client

from tests.e2e import scenarios
from tests.e2e.harness import Cluster, WorkerProcess


async def test_standalone_breach_terminates_and_recreates_the_replica(
        cluster: Cluster, worker_process: WorkerProcess, temporal_client: Client) -> None:
    await scenarios.s3_standalone_breach_terminates_and_recreates_the_replica(cluster, temporal_client)
