"""A thin JSON client over kubernetes.client.ApiClient.

Why not the typed API classes: they deserialise every pod into generated model objects, which costs more CPU than
the HTTP call itself when a replica has many pods, and custom resources come back as dicts anyway. This layer
keeps the ApiClient's auth, TLS and request accounting (worker.kube.InstrumentedApiClient) and speaks plain JSON.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client

JSON = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
FIELD_MANAGER = "grove-temporal"


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODCLIQUESETS = Resource("grove.io", "v1alpha1", "podcliquesets", "PodCliqueSet")
PODCLIQUES = Resource("grove.io", "v1alpha1", "podcliques", "PodClique")
SCALINGGROUPS = Resource("grove.io", "v1alpha1", "podcliquescalinggroups", "PodCliqueScalingGroup")
PODGANGS = Resource("scheduler.grove.io", "v1alpha1", "podgangs", "PodGang")
PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
EVENTS = Resource("", "v1", "events", "Event")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
NATIVE_PODGROUPS = Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup")  # the kube scheduler backend


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, reason: str, body: JSON | None = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body or {}
        message = self.body.get("message") or reason
        super().__init__(f"{status} {message}")

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self.reason)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def invalid(self) -> bool:
        """The request itself is wrong: retrying it cannot help."""
        return self.status in (400, 422)

    @property
    def forbidden(self) -> bool:
        return self.status in (401, 403)


class Kube:
    """JSON requests against one cluster."""

    def __init__(self, api_client: client.ApiClient, *, timeout: float = 30.0) -> None:
        self.api_client = api_client
        self.timeout = timeout

    # --- plumbing -------------------------------------------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
        stream: bool = False,
    ) -> Any:
        headers = {"Accept": "application/json", "Content-Type": content_type}
        query_params = [(k, v) for k, v in (query or {}).items() if v is not None and v != ""]
        method, url, header_params, serialized, _ = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query_params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(
                method, url, header_params=header_params, body=serialized,
                _request_timeout=timeout if timeout is not None else self.timeout,
            )
        except client.ApiException as exc:  # connection-level failures surface as status 0
            raise KubeError(exc.status or 0, str(exc.reason)) from exc
        except Exception as exc:  # urllib3 errors: the server is unreachable; callers treat this as an outage
            raise KubeError(0, f"{type(exc).__name__}: {exc}") from exc
        if stream:
            if response.status >= 400:
                raise _error_from(response.status, response.reason, response.read())
            return response.response
        data = response.read()
        if response.status >= 400:
            raise _error_from(response.status, response.reason, data)
        return json.loads(data) if data else {}

    def healthy(self, timeout: float = 3.0) -> bool:
        """True when the apiserver's /readyz answers 200."""
        try:
            response = self.api_client.call_api(
                *self.api_client.param_serialize(method="GET", resource_path="/readyz",
                                                 auth_settings=["BearerToken"])[:4],
                _request_timeout=timeout,
            )
            return bool(response.status == 200)
        except Exception:
            return False

    def api_resources(self, group_version: str) -> builtins.list[str]:
        """Discovery: the resource names the cluster serves in `group_version` (e.g. "scheduling.k8s.io/v1alpha2");
        empty when it serves no such group version. Outages raise KubeError like every other call."""
        path = f"/apis/{group_version}" if "/" in group_version else f"/api/{group_version}"
        try:
            listed = self._request("GET", path)
        except KubeError as exc:
            if exc.not_found:
                return []
            raise
        return [str(r.get("name")) for r in listed.get("resources") or []]

    # --- verbs ----------------------------------------------------------------------------------------------
    def get(self, resource: Resource, namespace: str | None, name: str) -> JSON | None:
        """The object, or None when it does not exist."""
        try:
            return self._request("GET", resource.path(namespace, name))  # type: ignore[no-any-return]
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> JSON:
        return self._request(  # type: ignore[no-any-return]
            "GET",
            resource.path(namespace),
            query={
                "labelSelector": label_selector,
                "fieldSelector": field_selector,
                "limit": limit,
                "continue": continue_token,
                "resourceVersion": resource_version,
            },
        )

    def list_items(self, resource: Resource, namespace: str | None = None, **kwargs: Any) -> builtins.list[JSON]:
        return builtins.list(self.list(resource, namespace, **kwargs).get("items") or [])

    def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        return self._request(  # type: ignore[no-any-return]
            "POST", resource.path(namespace), body=body, query={"fieldManager": FIELD_MANAGER}
        )

    def replace(self, resource: Resource, namespace: str | None, name: str, body: JSON) -> JSON:
        return self._request(  # type: ignore[no-any-return]
            "PUT", resource.path(namespace, name), body=body, query={"fieldManager": FIELD_MANAGER}
        )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        content_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> JSON:
        return self._request(  # type: ignore[no-any-return]
            "PATCH",
            resource.path(namespace, name, subresource),
            body=body,
            content_type=content_type,
            query={"fieldManager": FIELD_MANAGER},
        )

    def delete(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        uid: str | None = None,
        propagation: str = "Background",
    ) -> bool:
        """Delete `name`, only if its UID is still `uid`. False when it was already gone (or replaced)."""
        body: JSON = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self._request("DELETE", resource.path(namespace, name), body=body)
            return True
        except KubeError as exc:
            if exc.not_found:
                return False
            if exc.conflict and uid:  # precondition failed: a different object now has this name
                return False
            raise

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[JSON]:
        """Watch events ({"type", "object"}) from `resource_version` until the server closes the stream.

        on_open receives the open HTTP response: closing it from another thread ends the watch promptly."""
        raw = self._request(
            "GET",
            resource.path(namespace),
            query={
                "watch": "true",
                "resourceVersion": resource_version,
                "allowWatchBookmarks": "true",
                "labelSelector": label_selector,
                "timeoutSeconds": timeout_seconds,
            },
            timeout=(10.0, timeout_seconds + 30.0),
            stream=True,
        )
        if on_open is not None:
            on_open(raw)
        try:
            buffer = b""
            for chunk in raw.stream(65536, decode_content=True):
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (urllib3.exceptions.ProtocolError, urllib3.exceptions.ReadTimeoutError, OSError) as exc:
            raise KubeError(0, f"watch stream broken: {type(exc).__name__}") from exc
        finally:
            raw.release_conn()


def _error_from(status: int, reason: str | None, data: bytes | None) -> KubeError:
    body: JSON = {}
    if data:
        try:
            parsed = json.loads(data)
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            body = {"message": data[:500].decode(errors="replace")}
    return KubeError(status, reason or "", body)


def owned_by(obj: JSON, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in (obj.get("metadata", {}).get("ownerReferences") or []))


def owner_reference(owner: JSON, *, controller: bool = True, block_owner_deletion: bool = True) -> JSON:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": controller,
        "blockOwnerDeletion": block_owner_deletion,
    }
