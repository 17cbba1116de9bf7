"""Lease-based leader election, so that N worker processes run one watcher between them.

Temporal already spreads workflows and activities over every worker; only the watcher (which turns Kubernetes
watch events into nudges) must not run N times, or API load and signal volume would grow with the worker count.

The algorithm is client-go's: a coordination.k8s.io Lease records the holder and renew time; a candidate takes
over only after the record has not changed for a whole lease duration as measured on its *own* clock, so clock
skew between machines cannot shorten a lease.

One shortcut, for a worker restarted on the same machine (kill -9 and start again, `grove-temporal run`, a
systemd restart): identities are `host-pid`, and a holder on this host, in this PID namespace (recorded on the
Lease), whose process no longer exists cannot renew, so its Lease is taken at once instead of after the whole
duration. Any doubt (another host, another PID namespace, an identity not of that form, a live or unknown
process) waits the duration out as before. A worker restarted inside its pod keeps its identity and PID (1) and
reclaims its own Lease at once anyway.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any

from activities.kubeapi import LEASES, Kube, KubeError

log = logging.getLogger(__name__)

# The holder's PID namespace: a PID is meaningful only inside it (containers on one host share hostnames rarely,
# PIDs often).
PID_NAMESPACE_ANNOTATION = "grove-temporal.io/holder-pid-namespace"


def pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, as someone else's
        return True
    return True


def holder_gone(holder: str, holder_namespace: str, identity: str, namespace: str,
                exists: Callable[[int], bool] = process_exists) -> bool:
    """Whether `holder` was a process on this host, in our PID namespace, that no longer exists (certain only then)."""
    host, _, pid = holder.rpartition("-")
    our_host = identity.rpartition("-")[0]
    if not host or host != our_host or not pid.isdigit() or not namespace or holder_namespace != namespace:
        return False
    return int(pid) != os.getpid() and not exists(int(pid))


def _micro_time(now: datetime) -> str:
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseElector:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        # client-go's defaults (LeaseDuration 15 s, RetryPeriod 2 s; renewing every 5 s keeps its 10 s renew
        # deadline, 2/3 of the lease, with room for one failed attempt): a crashed leader's watcher is replaced
        # ~15-17 s after its last renewal, and that wait bounds how soon a new worker sees anything change.
        lease_seconds: int = 15,
        renew_every: float = 5.0,
        retry_every: float = 2.0,
        annotations: Callable[[], dict[str, str]] = dict,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_every = renew_every
        self.retry_every = retry_every
        # What the leader records on the Lease with each write (the watcher's nudge watermark, worker/watermark.py);
        # an annotation it does not give is left as the Lease has it.
        self.annotations = annotations
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self.is_leader = False
        self.pid_namespace = pid_namespace()
        self._written: dict[str, Any] | None = None  # the Lease as our last write left it (with its resourceVersion)
        # The holder this term's Lease was taken from because it ran on this host and its process is gone; None when
        # the Lease was free, expired or ours. Set before lead() starts.
        self.taken_from_dead: str | None = None

    def _renew_written(self) -> bool | None:
        """Renew from our own last write, without reading first: one request per renewal. None when there is no
        such write, or someone else wrote since (409): then read and decide as usual."""
        lease = self._written
        if lease is None:
            return None
        now = datetime.now(UTC)
        lease = {**lease, "metadata": self._annotated(lease.get("metadata") or {}),
                 "spec": {**lease["spec"], "renewTime": _micro_time(now)}}
        try:
            self._written = self.kube.replace(LEASES, self.namespace, self.name, lease)
            return True
        except KubeError as exc:
            self._written = None
            if exc.conflict or exc.not_found:
                return None
            raise

    def _annotated(self, metadata: dict[str, Any]) -> dict[str, Any]:
        try:
            ours = self.annotations()
        except Exception:  # noqa: BLE001 - a record we cannot make must not cost the Lease
            log.exception("leader election: the Lease's annotations could not be made; left as they are")
            ours = {}
        if not ours:
            return metadata
        return {**metadata, "annotations": {**(metadata.get("annotations") or {}), **ours}}

    def _try_acquire_or_renew(self) -> bool:
        if self.is_leader:
            renewed = self._renew_written()
            if renewed is not None:
                return renewed
        self._written = None
        now = datetime.now(UTC)
        lease = self.kube.get(LEASES, self.namespace, self.name)
        self.taken_from_dead = None
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": _micro_time(now),
        }
        if lease is None:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": self._annotated({"name": self.name, "namespace": self.namespace,
                                             "annotations": {PID_NAMESPACE_ANNOTATION: self.pid_namespace}}),
                "spec": {**spec, "acquireTime": _micro_time(now), "leaseTransitions": 0},
            }
            try:
                self._written = self.kube.create(LEASES, self.namespace, body)
                return True
            except KubeError as exc:
                if exc.conflict:
                    return False
                raise
        current = lease.get("spec") or {}
        holder = current.get("holderIdentity") or ""
        record = (holder, str(current.get("renewTime")))
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        duration = float(current.get("leaseDurationSeconds") or self.lease_seconds)
        expired = time.monotonic() - self._observed_at >= duration
        annotations = (lease.get("metadata") or {}).get("annotations") or {}
        if holder and holder != self.identity and not expired:
            if not holder_gone(holder, annotations.get(PID_NAMESPACE_ANNOTATION, ""), self.identity,
                               self.pid_namespace):
                return False
            log.info("leader election: holder %s of %s/%s ran on this host and its process is gone: taking over "
                     "without waiting out its lease", holder, self.namespace, self.name)
            self.taken_from_dead = holder
        if holder != self.identity:
            spec["acquireTime"] = _micro_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        else:
            spec["acquireTime"] = current.get("acquireTime") or _micro_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0)
        lease["spec"] = spec  # full replace with the read resourceVersion: a concurrent writer gets 409
        lease["metadata"] = self._annotated({**(lease.get("metadata") or {}),
                                             "annotations": {**annotations, PID_NAMESPACE_ANNOTATION: self.pid_namespace}})
        try:
            self._written = self.kube.replace(LEASES, self.namespace, self.name, lease)
            return True
        except KubeError as exc:
            if exc.conflict:
                return False
            raise

    def _release(self) -> None:
        self._written = None
        lease = self.kube.get(LEASES, self.namespace, self.name)
        if not lease or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
            return
        lease["spec"]["holderIdentity"] = None
        lease["spec"]["leaseDurationSeconds"] = 1
        lease["metadata"] = self._annotated(lease.get("metadata") or {})  # a graceful stop leaves its latest record
        self.kube.replace(LEASES, self.namespace, self.name, lease)

    async def _attempt(self) -> bool:
        try:
            return await asyncio.to_thread(self._try_acquire_or_renew)
        except KubeError as exc:
            log.warning("leader election: lease %s/%s: %s", self.namespace, self.name, exc)
            return False

    async def run(self, lead: Callable[[], Coroutine[Any, Any, None]], stop: asyncio.Event,
                  unfit: Callable[[], str | None] = lambda: None) -> None:
        """Campaign until `stop`; while leading, run `lead()`; cancel it as soon as leadership is lost.

        `unfit` is asked at each renewal: a reason makes this worker step down (hand the Lease back at once, then
        sit out one lease duration so that another worker takes it). A leader that reaches kube-apiserver but not
        Temporal would otherwise keep the Lease while none of its nudges arrive."""
        sit_out = 0.0
        while not stop.is_set():
            if sit_out:
                await _sleep_or_stop(stop, sit_out)
                sit_out = 0.0
                continue
            if not await self._attempt():
                await _sleep_or_stop(stop, self.retry_every)
                continue
            self.is_leader = True
            log.info("leader election: %s leads %s/%s", self.identity, self.namespace, self.name)
            task = asyncio.create_task(lead())
            last_renewed = time.monotonic()
            try:
                while not stop.is_set() and not task.done():
                    await _sleep_or_stop(stop, self.renew_every, task)
                    if stop.is_set() or task.done():
                        break
                    reason = unfit()
                    if reason is not None:
                        log.warning("leader election: %s steps down from %s/%s for %ss: %s", self.identity,
                                    self.namespace, self.name, self.lease_seconds, reason)
                        sit_out = float(self.lease_seconds)
                        break
                    if await self._attempt():
                        last_renewed = time.monotonic()
                    elif time.monotonic() - last_renewed >= self.lease_seconds * 2 / 3:
                        log.warning("leader election: %s lost %s/%s", self.identity, self.namespace, self.name)
                        break
            finally:
                self.is_leader = False
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            if stop.is_set() or sit_out:
                try:
                    await asyncio.to_thread(self._release)
                except KubeError as exc:
                    log.warning("leader election: release failed: %s", exc)


async def _sleep_or_stop(stop: asyncio.Event, seconds: float, task: asyncio.Task[None] | None = None) -> None:
    waiters: list[asyncio.Future[object]] = [asyncio.ensure_future(stop.wait())]
    if task is not None:
        waiters.append(task)  # type: ignore[arg-type]
    _, pending = await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    for fut in pending:
        if fut is not task:
            fut.cancel()
