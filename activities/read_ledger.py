"""What each replica workflow's latest reads from this worker's watch cache saw, for the watcher to skip nudges
those reads already answered (issue 17).

A replica workflow judges a nudge by the resourceVersions it carries (workflows/nudges.py): one whose every version
its latest read already reached calls for no round, but its signal still costs the workflow a workflow task and four
history events. Under load that happened 35 times in 40 replicas of 17 pods (one replica in four had an empty round): a
pod change was heard, its nudge held for the status window or queued behind the nudge in flight, and meanwhile the
round woken by that nudge read the change. The read and the watcher share this process's cache, so the watcher can
tell.

Only a read that returned to its workflow is noted: the activity's result reaches the workflow unless its workflow
task is lost, and then the task runs again with a new read (a local activity not in the history runs again; an
activity is retried). The versions are the cache's, the same numbers the watcher's nudges carry. A nudge without
versions is never skipped (only a read from the apiserver answers it), nor one for a workflow whose reads ran on
another worker (nothing noted here): the workflow judges those itself, as before.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

# A noted read is forgotten after this long: a nudge held or queued that long behind it is rare, and then sent.
KEEP_SECONDS = 60.0


class ReadLedger:
    """workflow id -> kind -> the resourceVersion its reads from this cache have reached. Written by activity
    threads, read by the watcher on the event loop."""

    def __init__(self, keep_seconds: float = KEEP_SECONDS) -> None:
        self.keep_seconds = keep_seconds
        self._lock = threading.Lock()
        self._reads: OrderedDict[str, tuple[float, dict[str, int]]] = OrderedDict()  # oldest noted first

    def note(self, workflow_id: str, versions: dict[str, int]) -> None:
        """A read from the cache, at `versions`, returned to `workflow_id`'s workflow."""
        if not versions:
            return
        now = time.monotonic()
        with self._lock:
            _, had = self._reads.pop(workflow_id, (0.0, {}))
            self._reads[workflow_id] = (now, {kind: max(version, had.get(kind, version))
                                              for kind, version in (had | versions).items()})
            while self._reads:
                oldest, (at, _) = next(iter(self._reads.items()))
                if now - at <= self.keep_seconds:
                    break
                del self._reads[oldest]

    def noted_at(self, workflow_id: str) -> float | None:
        """When (time.monotonic) a read of `workflow_id` was last noted here; None: not within KEEP_SECONDS."""
        with self._lock:
            at, _ = self._reads.get(workflow_id, (None, {}))
        return at if at is not None and time.monotonic() - at <= self.keep_seconds else None

    def covers(self, workflow_id: str, versions: dict[str, int] | None) -> bool:
        """Whether a read noted for `workflow_id` reached every version of a nudge (never one without versions)."""
        if not versions:
            return False
        with self._lock:
            at, read = self._reads.get(workflow_id, (0.0, {}))
        if time.monotonic() - at > self.keep_seconds:
            return False
        return all(version <= read.get(kind, -1) for kind, version in versions.items())

