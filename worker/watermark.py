"""The nudge watermark: how far the watcher's leader had nudged every change, kept on its Lease for the next one.

A worker that has just started remembers nothing, so every item of its first lists looks new to it; it used to nudge
every replica, and each nudge made the restarted worker replay that replica's history for a change it had already
delivered (1,000 replays after every `helm upgrade` of the workers, with nothing changed). So the leader records,
per kind, a resourceVersion up to which every change it heard has been nudged and the nudge delivered (taken only
when nothing is pending, held or in flight), and writes it on the Lease with each renewal. A process taking over
leaves alone a replica that its cache shows whole (nothing missing or surplus: no deletion can have gone unseen)
and whose items are all at or below the watermark: the previous leader delivered each of those changes.

Kept to what a Lease may say: a claim about the past, true whoever wrote it, so a later leader that knows nothing of
it (an older version) leaves it in place harmlessly. Item versions are compared as integers, as the watch cache
already does; a watermark above what this process has listed (another cluster's, or an etcd restored from a backup)
is not trusted, and every replica is nudged as before.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from activities.kubeapi import JSON

log = logging.getLogger(__name__)

ANNOTATION = "grove-temporal.io/nudged-through"

Versions = dict[str, int]  # kind -> resourceVersion


def encode(watermark: Versions) -> str:
    return json.dumps(watermark, sort_keys=True, separators=(",", ":"))


def read(lease: JSON | None) -> Versions | None:
    """The watermark a Lease carries; None if it carries none, or one this version cannot read (then nothing is
    skipped)."""
    raw = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    if not raw:
        return None
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not all(
            isinstance(kind, str) and isinstance(version, int) and not isinstance(version, bool)
            for kind, version in parsed.items()):
        log.warning("watcher: the Lease's %s annotation is not a map of kind to resourceVersion (%.100r); every "
                    "replica of the first lists is nudged", ANNOTATION, raw)
        return None
    return parsed


def trusted(watermark: Versions | None, listed: Mapping[str, int]) -> Versions | None:
    """The watermark, if every kind it names has been listed by this process at or past it: a watermark ahead of
    the cluster's own versions was written against other data."""
    if not watermark:
        return None
    if any(listed.get(kind, -1) < version for kind, version in watermark.items()):
        log.warning("watcher: the Lease's nudge watermark %s is ahead of this cluster's versions %s (another cluster, "
                    "or etcd restored from a backup?); every replica of the first lists is nudged", watermark,
                    dict(listed))
        return None
    return watermark


def covers(watermark: Versions | None, versions: Versions | None) -> bool:
    """Every item version of a replica is at or below the watermark of its kind: its changes were all delivered."""
    if not watermark or not versions:
        return False
    return all(kind in watermark and version <= watermark[kind] for kind, version in versions.items())
