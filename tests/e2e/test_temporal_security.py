"""Temporal connection security from configuration: TLS with a private CA and server name, mTLS, the API key — and
the key never reaching logs, metrics, Kubernetes Events, search attributes, memos or workflow histories.

The dev server speaks plaintext only, so a TLS-terminating proxy (tests/e2e/tlsproxy.py) stands in front of it and
reads the gRPC headers clients send through it.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import secrets
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr
from temporalio.client import Client

from localstack.stack import LocalStack
from tests import deploykit
from tests.e2e.harness import Cluster, Replica, WorkerProcess, clique, pcs_manifest, wait_for
from tests.e2e.tlsproxy import SERVER_NAME, Authority, Issued, TlsProxy
from tests.histories import run_histories
from worker.app import connect
from worker.config import TemporalSettings
from workflows.contract import reconciler_workflow_id
from workflows.messages import Phase


class Pki:
    def __init__(self, directory: Path) -> None:
        self.authority = Authority(directory, "temporal")
        self.server = self.authority.issue(SERVER_NAME, server=True)
        self.client = self.authority.issue("grove-temporal-worker", server=False)
        self.rogue_client = Authority(directory, "rogue").issue("grove-temporal-worker", server=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_proxy(stack: LocalStack, pki: Pki) -> Iterator[TlsProxy]:
    proxy = TlsProxy(stack.temporal_address, pki.server).start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="module")
def mtls_proxy(stack: LocalStack, pki: Pki) -> Iterator[TlsProxy]:
    proxy = TlsProxy(stack.temporal_address, pki.server, client_ca=pki.authority.ca).start()
    yield proxy
    proxy.stop()


def settings(address: str, *, tls: bool = True, ca: Path | None = None, server_name: str | None = None,
             client: Issued | None = None, api_key: str | None = None) -> TemporalSettings:
    """Explicit settings: nothing from this process's environment."""
    return TemporalSettings(
        address=address, namespace="default", tls=tls, api_key=SecretStr(api_key) if api_key else None,
        tls_ca_path=str(ca) if ca else None, tls_server_name=server_name,
        tls_cert_path=str(client.cert) if client else None, tls_key_path=str(client.key) if client else None)


def readable(node: object) -> str:
    """Every string of a history's JSON, with base64 fields (payload data, metadata) decoded as well."""
    if isinstance(node, dict):
        return "\n".join(readable(v) for v in node.values())
    if isinstance(node, list):
        return "\n".join(readable(v) for v in node)
    if not isinstance(node, str):
        return str(node)
    try:
        return node + "\n" + base64.b64decode(node, validate=True).decode(errors="replace")
    except (binascii.Error, ValueError):
        return node


async def connect_and_check(config: TemporalSettings) -> Client:
    client = await asyncio.wait_for(connect(config), timeout=30)
    assert await client.service_client.check_health()
    return client


async def refused(config: TemporalSettings) -> str:
    with pytest.raises(RuntimeError) as failure:
        await asyncio.wait_for(connect(config), timeout=30)
    return str(failure.value)


async def test_tls_connects_with_the_configured_ca_and_server_name(tls_proxy: TlsProxy, pki: Pki) -> None:
    await connect_and_check(settings(tls_proxy.address, ca=pki.authority.ca, server_name=SERVER_NAME))
    # Each missing piece fails at once, saying what is wrong.
    assert "UnknownIssuer" in await refused(settings(tls_proxy.address, server_name=SERVER_NAME))
    assert "NotValidForName" in await refused(settings(tls_proxy.address, ca=pki.authority.ca))
    # Plain text to a TLS port: the proxy drops the connection; the SDK names it either way depending on when the
    # close reaches it ("transport error", or "connection closed" as the call was cancelled; CI on 41eefa7).
    plain = await refused(settings(tls_proxy.address, tls=False))
    assert "transport error" in plain or "connection closed" in plain, plain


async def test_mtls_needs_a_client_certificate_from_the_servers_ca(mtls_proxy: TlsProxy, pki: Pki) -> None:
    await connect_and_check(settings(mtls_proxy.address, ca=pki.authority.ca, server_name=SERVER_NAME,
                                     client=pki.client))
    accepted = len(mtls_proxy.requests)
    assert accepted >= 2  # GetSystemInfo at connect, then the health check
    for client in (None, pki.rogue_client):
        message = await refused(settings(mtls_proxy.address, ca=pki.authority.ca, server_name=SERVER_NAME,
                                         client=client))
        assert "Failed client connect" in message
    assert len(mtls_proxy.requests) == accepted, "no request of a client without a valid certificate got through"


async def test_the_api_key_is_sent_as_a_bearer_token(tls_proxy: TlsProxy, pki: Pki) -> None:
    key = f"key-{secrets.token_hex(8)}"
    await connect_and_check(settings(tls_proxy.address, ca=pki.authority.ca, server_name=SERVER_NAME, api_key=key))
    assert f"Bearer {key}" in tls_proxy.authorizations()
    before = len(tls_proxy.requests)
    await connect_and_check(settings(tls_proxy.address, ca=pki.authority.ca, server_name=SERVER_NAME))
    assert not any("authorization" in h for h in tls_proxy.requests[before:]), "no key configured, none sent"


async def test_a_worker_configured_by_environment_runs_over_mtls_and_never_leaks_its_api_key(
        stack: LocalStack, cluster: Cluster, namespace: str, service_account_kubeconfig: Path, mtls_proxy: TlsProxy,
        pki: Pki, temporal_client: Client) -> None:
    marker = f"MARKER-{secrets.token_hex(12)}"
    log_dir = Path(stack.run_dir) / "test-workers"
    log_dir.mkdir(parents=True, exist_ok=True)
    worker = WorkerProcess(
        kubeconfig=service_account_kubeconfig, temporal_address=mtls_proxy.address, namespace=namespace,
        log_dir=log_dir, extra_args=["--log-level", "DEBUG"],
        extra_env={"TEMPORAL_TLS": "true", "TEMPORAL_TLS_CA": str(pki.authority.ca),
                   "TEMPORAL_TLS_CERT": str(pki.client.cert), "TEMPORAL_TLS_KEY": str(pki.client.key),
                   "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME, "TEMPORAL_API_KEY": marker,
                   "GROVE_TEMPORAL_LEASE_NAMESPACE": deploykit.NAMESPACE}).start()
    try:
        cluster.apply(pcs_manifest("sec", namespace, termination_delay="2s", cliques=[clique("frontend", 2, 2)]))
        wait_for(lambda: cluster.ready_pods(2), timeout=60, what="2 Ready pods")
        replica = Replica(temporal_client, cluster, "sec")  # the test's own plain client, straight to the server
        await replica.wait_phase(Phase.AVAILABLE)
        cluster.fail_readiness("sec-0-frontend-1")  # a termination: warnings, Events, more history
        await replica.wait(lambda s: s.terminations_total == 1, timeout=30, what="a termination")
        await replica.wait_phase(Phase.AVAILABLE)
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.http_port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
    finally:
        worker.stop()

    assert f"Bearer {marker}" in mtls_proxy.authorizations(), "the worker sent its key, through TLS"
    assert marker not in worker.logs()
    assert marker not in metrics
    assert not [e for e in cluster.events() if marker in str(e)]
    workflow_ids = [replica.workflow_id, reconciler_workflow_id(namespace)]
    for workflow_id in workflow_ids:
        handle = temporal_client.get_workflow_handle(workflow_id)
        description = await handle.describe()
        assert marker not in repr(description.raw_description.workflow_execution_info.search_attributes)
        assert marker not in repr(description.raw_description.workflow_execution_info.memo)
        assert marker not in repr(await description.memo())
        runs = await run_histories(temporal_client, workflow_id)  # the replica hands over once quiet again
        texts = [readable(json.loads(history.to_json())) for history in runs]
        assert not [text for text in texts if marker in text]
        if workflow_id == replica.workflow_id:  # control: this scan sees inside payloads, the raw JSON does not
            assert any("sec-0-frontend-1" in text for text in texts)
            assert not any("sec-0-frontend-1" in history.to_json() for history in runs)
