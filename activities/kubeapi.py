"""The one Kubernetes client module: API clients built from an explicit kubeconfig (never global state), a thin
JSON client over them, object accessors, and one list+watch loop (owner references are built in grove.manifests).

Why not the typed API classes: they deserialise every pod into generated model objects, which costs more CPU than
the HTTP call itself when a replica has many pods, and custom resources come back as dicts anyway. This layer
keeps the ApiClient's auth, TLS and request accounting (InstrumentedApiClient) and speaks plain JSON.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson
import urllib3
from kubernetes import client, config

from activities.reachability import Reachability
from grove.names import LABEL_MANAGED_BY, MANAGED_BY, SCHEDULING_GATE
from grove.ownership import controller_reference

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
HPAS = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
NATIVE_PODGROUPS = Resource("scheduling.k8s.io", "v1alpha2", "podgroups", "PodGroup")  # the kube scheduler backend


# --- API clients ---------------------------------------------------------------------------------------------
# TCP keepalive on every connection to kube-apiserver: a watch whose peer went away without a word (packets dropped,
# a node gone) is noticed in about half a minute instead of at its read timeout (the watch timeout plus 30 s), and
# a request whose bytes go unacknowledged fails after 30 s (TCP_USER_TIMEOUT). client-go keeps its connections alive
# the same way (a 30 s keepalive, and HTTP/2 pings).
KEEPALIVE_SECONDS = (10, 5, 3)  # idle before the first probe, between probes, unanswered probes
USER_TIMEOUT_MS = 30_000


def socket_options() -> list[tuple[int, int, int]]:
    """urllib3's defaults (no Nagle) plus keepalive; options the platform lacks are left out."""
    options = list(urllib3.connection.HTTPConnection.default_socket_options)
    options.append((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1))
    idle, interval, count = KEEPALIVE_SECONDS
    for name, value in (("TCP_KEEPIDLE", idle), ("TCP_KEEPINTVL", interval), ("TCP_KEEPCNT", count),
                        ("TCP_USER_TIMEOUT", USER_TIMEOUT_MS)):
        if hasattr(socket, name):
            options.append((socket.IPPROTO_TCP, getattr(socket, name), value))
    return options


# The kubernetes package keeps a process-wide default configuration; tests run several clients (admin and the
# worker's ServiceAccount) in one process, so every client here gets its own Configuration.
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
    configuration.socket_options = socket_options()
    configuration.retries = RETRIES
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


# urllib3 tries a request again after a failed connect (up to three times), but not after a read that timed out: by
# its default, a request that hangs (a network partition) waited its whole timeout four times, two minutes for a GET
# of the default 30 s, where the activity that made it has 10 or 60 s. A dropped keep-alive connection is noticed
# before it is reused, so it is not a read failure.
RETRIES = urllib3.util.Retry(total=3, read=0)

# The moment (time.monotonic) by which a request made in this context must have ended: the activity attempt's own
# end (activities/replica.py sets it). Without it a request that hangs (a network partition drops packets; it does not
# refuse them) outlived its local activity's 10 s, held an activity thread up to the client's 30 s timeout, and the
# attempt ended as timed out, retried by the policy's back-off; now it fails as unreachable within the attempt, which
# then waits for kube-apiserver to answer (activities/reachability.py).
REQUEST_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("kube_request_deadline", default=None)
MIN_REQUEST_SECONDS = 0.5


def bounded(timeout: float | tuple[float, float]) -> float | tuple[float, float]:
    """`timeout`, cut to what is left before this context's REQUEST_DEADLINE (never under MIN_REQUEST_SECONDS)."""
    deadline = REQUEST_DEADLINE.get()
    if deadline is None:
        return timeout
    left = max(MIN_REQUEST_SECONDS, deadline - time.monotonic())
    if isinstance(timeout, tuple):
        return (min(timeout[0], left), min(timeout[1], left))
    return min(timeout, left)


class KubeError(Exception):
    """An API call failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, reason: str, body: JSON | None = None,
                 reachability: Reachability | None = None) -> None:
        self.status = status
        self.reachability = reachability  # unreachable: where to wait until kube-apiserver answers again
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
    def replaced(self) -> bool:
        """A patch carrying metadata.uid as a precondition met another object of that name: kube-apiserver answers
        422 (metadata.uid is immutable), not the 409 a DELETE's preconditions get."""
        if self.status != 422:
            return False
        causes = (self.body.get("details") or {}).get("causes") or []
        return any(c.get("field") == "metadata.uid" for c in causes)

    @property
    def invalid(self) -> bool:
        """The request itself is wrong: retrying it cannot help."""
        return self.status in (400, 422)

    @property
    def forbidden(self) -> bool:
        return self.status in (401, 403)

    @property
    def unreachable(self) -> bool:
        """No HTTP answer at all: the apiserver is down or the network to it is."""
        return self.status == 0


# A request's timeouts: to connect, and of silence while it waits for the answer (per read, not in total, so a large
# LIST that keeps streaming is not cut off). kube-apiserver answers within a second or two even under load; a request
# that hears nothing for 10 s is lost (a partition drops its packets) and fails as unreachable, and the attempt waits
# for /readyz instead (activities/reachability.py). Before, such a request came through only when TCP retransmitted
# it, about 8 s after a 20 s partition healed. Watches set their own.
CONNECT_SECONDS = 5.0
SILENCE_SECONDS = 10.0


class Kube:
    """JSON requests against one cluster."""

    def __init__(self, api_client: client.ApiClient, *,
                 timeout: float | tuple[float, float] = (CONNECT_SECONDS, SILENCE_SECONDS)) -> None:
        self.api_client = api_client
        self.timeout = timeout
        self.reachability = Reachability(lambda seconds: self.healthy(timeout=seconds))

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
                _request_timeout=bounded(timeout if timeout is not None else self.timeout),
            )
        except client.ApiException as exc:  # connection-level failures surface as status 0
            raise KubeError(exc.status or 0, str(exc.reason),
                            reachability=None if exc.status else self.reachability) from exc
        except Exception as exc:  # urllib3 errors: the server is unreachable; callers treat this as an outage
            raise KubeError(0, f"{type(exc).__name__}: {exc}", reachability=self.reachability) from exc
        if stream:
            if response.status >= 400:
                raise _error_from(response.status, response.reason, response.read())
            return response.response
        data = response.read()
        if response.status >= 400:
            raise _error_from(response.status, response.reason, data)
        return orjson.loads(data) if data else {}

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
                        yield orjson.loads(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            # A stream cut mid-read: the server went away, or the watch was shut down from another thread. What was
            # read last may be a torn line (orjson.loads raises ValueError: its JSONDecodeError) or
            # a closed file ("I/O operation on closed file"). Either way the stream is over, not the watcher.
            raise KubeError(0, f"watch stream broken: {type(exc).__name__}") from exc
        finally:
            with contextlib.suppress(Exception):
                raw.release_conn()


def _error_from(status: int, reason: str | None, data: bytes | None) -> KubeError:
    body: JSON = {}
    if data:
        try:
            parsed = orjson.loads(data)
            if isinstance(parsed, dict):
                body = parsed
        except ValueError:
            body = {"message": data[:500].decode(errors="replace")}
    return KubeError(status, reason or "", body)


# --- object accessors -----------------------------------------------------------------------------------------
def name_of(obj: JSON) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def uid_of(obj: JSON) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


def resource_version(obj: JSON) -> int | None:
    """An object's (or a LIST's) resourceVersion as an integer: versions of one kind compare as integers since
    Kubernetes 1.35 (KEP-5504). None where it is missing or not an integer (another apiserver)."""
    version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
    return int(version) if version.isdigit() else None


def slim(obj: JSON) -> JSON:
    """What a follower keeps of an object: enough to map a later DELETED (or one that vanished between two lists) to
    its PodCliqueSet replica, and a PodClique's minAvailable (a pod's Ready that reaches it is a change to act on)."""
    meta, spec = obj.get("metadata", {}), obj.get("spec") or {}
    kept = {"replicas": spec.get("replicas")}
    if "minAvailable" in spec:
        kept["minAvailable"] = spec["minAvailable"]
    return {
        "metadata": {"namespace": meta.get("namespace"), "name": meta.get("name"), "uid": meta.get("uid"),
                     "labels": meta.get("labels") or {}},
        "spec": kept,
    }


def terminating(obj: JSON) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def ours(obj: JSON) -> bool:
    return (obj.get("metadata", {}).get("labels") or {}).get(LABEL_MANAGED_BY) == MANAGED_BY


def generation_observed(obj: JSON) -> bool:
    """The object's status shows its current generation observed (`status.observedGeneration`)."""
    generation = (obj.get("metadata") or {}).get("generation")
    return generation is not None and (obj.get("status") or {}).get("observedGeneration") == generation


def condition_of(obj: JSON, kind: str) -> JSON:
    """The object's status condition of type `kind`; {} where it has none."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def condition_true(obj: JSON, kind: str) -> bool:
    """The object's status condition of type `kind` is True (a pod's, or one of ours)."""
    return condition_of(obj, kind).get("status") == "True"


def pod_ready(pod: JSON) -> bool:
    return condition_true(pod, "Ready")


def pod_scheduled(pod: JSON) -> bool:
    return condition_true(pod, "PodScheduled") or bool((pod.get("spec") or {}).get("nodeName"))


def pod_gated(pod: JSON) -> bool:
    return any(g.get("name") == SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def controller_uid(obj: JSON) -> str | None:
    """The UID of the object's one controller reference (grove.ownership's rule); None if it has none."""
    ref = controller_reference(obj)
    uid = ref.get("uid") if ref is not None else None
    return uid if isinstance(uid, str) and uid else None


# --- the one list+watch loop -----------------------------------------------------------------------------------
WatchHandler = Callable[[str, JSON, bool], object]  # (ADDED | MODIFIED | DELETED, object, from a relist)


class ListWatch:
    """Informer-style following of one resource: list, then watch from the list's resourceVersion.

    Relists when the server says the version is gone (410), after a broken stream or an apiserver outage (with
    exponential back-off) and, if `resync_seconds` is set, periodically. A relist hands over only the difference
    from what was known, as events flagged `relisted`: DELETED for objects that vanished meanwhile (first, so a
    name reused by a new UID is seen gone and then added), then ADDED and MODIFIED (by resourceVersion). Handlers
    run on the loop's thread; `on_synced` gets every listed object after each list. `stop()` ends it promptly, from any thread, without an error."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None,
        on_event: WatchHandler,
        *,
        label_selector: str | None = None,
        on_synced: Callable[[builtins.list[JSON]], object] | None = None,
        on_error: Callable[[Exception, float], object] | None = None,
        keep: Callable[[JSON], JSON] | None = None,
        resync_seconds: float | None = None,
        watch_timeout_seconds: int = 300,
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.on_event = on_event
        self.label_selector = label_selector
        self.on_synced = on_synced
        self.on_error = on_error  # (error, seconds until the retry); default: nothing said
        self.keep = keep or (lambda obj: obj)  # what is remembered of an object for a DELETED seen only by relist
        self.resync_seconds = resync_seconds
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff = backoff
        self.relists = 0  # lists after the first
        # While on_event is called for a LIST's items and the deletions it found: that LIST's resourceVersion, which
        # every one of those changes is at or before. None while it is called for a watch event.
        self.listed_at: str | None = None
        # The resourceVersion every change up to which has been handed to on_event (a LIST's own, then each watch
        # event's and bookmark's); None before the first list. Read from other threads: a str swap is atomic.
        self.resource_version: str | None = None
        self._known: dict[str, tuple[str, JSON]] = {}  # uid -> (resourceVersion, kept object)
        self._stop = threading.Event()
        self._stream: Any = None
        self._thread: threading.Thread | None = None

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def start(self, name: str | None = None) -> ListWatch:
        self._thread = threading.Thread(target=self.run, daemon=True,
                                        name=name or f"listwatch-{self.resource.plural}")
        self._thread.start()
        return self

    def stop(self, join_seconds: float | None = None) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.shutdown() if hasattr(stream, "shutdown") else stream.close()
        if join_seconds is not None and self._thread is not None:
            self._thread.join(join_seconds)

    def run(self) -> None:
        delay = self.backoff[0]
        first = True
        while not self._stop.is_set():
            try:
                version = self._list(relisted=not first)
                first, delay = False, self.backoff[0]
                self._watch(version)
            except Exception as error:  # a broken stream, an outage, or a stream we closed: relist when it answers
                if self._stop.is_set():
                    return
                if self.on_error is not None:
                    self.on_error(error, delay)
                if self._stop.wait(delay):
                    return
                delay = min(delay * 2, self.backoff[1])

    def _list(self, relisted: bool) -> str:
        listing = self.kube.list(self.resource, self.namespace, label_selector=self.label_selector)
        if relisted:
            self.relists += 1
        items = listing.get("items") or []
        listed = {obj["metadata"]["uid"]: obj for obj in items}
        version = str(listing["metadata"]["resourceVersion"])
        self.listed_at = version
        try:
            for uid, (_, kept) in list(self._known.items()):
                if uid not in listed:
                    del self._known[uid]
                    self.on_event("DELETED", kept, relisted)
            for uid, obj in listed.items():
                item_version = obj["metadata"].get("resourceVersion", "")
                before = self._known.get(uid)
                if before is None or before[0] != item_version:
                    self._known[uid] = (item_version, self.keep(obj))
                    self.on_event("ADDED" if before is None else "MODIFIED", obj, relisted)
        finally:
            self.listed_at = None
        self.resource_version = version
        if self.on_synced is not None:
            self.on_synced(items)
        return version

    def _watch(self, version: str) -> None:
        """Watch until a resync is due (return: relist) or the stream fails (raise); a timeout just re-watches."""
        resync_at = time.monotonic() + self.resync_seconds if self.resync_seconds else None
        while not self._stop.is_set():
            timeout = self.watch_timeout_seconds
            if resync_at is not None:
                left = resync_at - time.monotonic()
                if left <= 0:
                    return
                timeout = int(max(1, min(timeout, left)))
            for event in self.kube.watch(self.resource, self.namespace, resource_version=version,
                                         label_selector=self.label_selector, timeout_seconds=timeout,
                                         on_open=self._opened):
                if self._stop.is_set():
                    return
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return  # our version is too old: relist at once
                    raise KubeError(int(obj.get("code") or 0), str(obj.get("message") or "watch error"), obj)
                version = obj.get("metadata", {}).get("resourceVersion", version)
                if kind == "BOOKMARK":
                    self.resource_version = version
                    continue
                uid = obj.get("metadata", {}).get("uid", "")
                if kind == "DELETED":
                    self._known.pop(uid, None)
                else:
                    self._known[uid] = (version, self.keep(obj))
                self.on_event(str(kind), obj, False)
                self.resource_version = version

    def _opened(self, stream: Any) -> None:
        self._stream = stream
        if self._stop.is_set():  # stopped while the request was on its way
            with contextlib.suppress(Exception):
                stream.shutdown() if hasattr(stream, "shutdown") else stream.close()
