"""Kubernetes API clients for the worker: built from an explicit kubeconfig, never from global state.

The kubernetes package keeps a process-wide default configuration; tests run several clients (admin and the
worker's ServiceAccount) in one process, so every client here gets its own Configuration.
"""

from __future__ import annotations

import os
import time
from urllib.parse import urlsplit

from kubernetes import client, config


def api_client(
    kubeconfig: str | None = None, *, context: str | None = None, pool_size: int = 64
) -> client.ApiClient:
    """An ApiClient for `kubeconfig` (or in-cluster config when None and running in a pod).

    pool_size bounds concurrent HTTP connections: activities run in a thread pool, so the urllib3 pool must be at
    least as large as that pool or threads queue on connections.
    """
    configuration = client.Configuration()
    if kubeconfig:
        config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=configuration)
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        path = os.environ.get("KUBECONFIG", os.path.expanduser("~/.kube/config"))
        config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
    configuration.connection_pool_maxsize = pool_size
    return InstrumentedApiClient(configuration)


def _verb_and_resource(method: str, url: str) -> tuple[str, str]:
    """Classify a request the way the apiserver's audit log would: verb and resource plural."""
    parsed = urlsplit(url)
    path, query = parsed.path, parsed.query
    parts = [p for p in path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        rest = rest[2:]
    resource = rest[0] if rest else (parts[-1] if parts else "")
    named = len(rest) >= 2
    subresource = rest[2] if len(rest) >= 3 else ""
    if subresource:
        resource = f"{resource}/{subresource}"
    method = method.upper()
    if method == "GET":
        verb = "watch" if "watch=true" in query.lower() or "watch=1" in query else "get" if named else "list"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
        if verb == "delete" and not named:
            verb = "deletecollection"
    return verb, resource


class InstrumentedApiClient(client.ApiClient):
    """An ApiClient that counts every request by verb, resource and status code, and times it."""

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None):  # type: ignore[no-untyped-def]
        from activities.metrics import KUBE_REQUEST_SECONDS, KUBE_REQUESTS

        verb, resource = _verb_and_resource(method, url)
        started = time.perf_counter()
        code = "error"
        try:
            response = super().call_api(method, url, header_params, body, post_params, _request_timeout)
            code = str(response.status)
            return response
        except client.ApiException as exc:
            code = str(exc.status)
            raise
        finally:
            KUBE_REQUESTS.labels(verb, resource, code).inc()
            KUBE_REQUEST_SECONDS.labels(verb, resource).observe(time.perf_counter() - started)
