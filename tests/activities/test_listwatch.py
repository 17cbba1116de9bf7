"""The one list+watch loop (activities.kubeapi.ListWatch) against the real kube-apiserver: live events, the
difference a relist hands over, and a prompt, quiet stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kubernetes.client import ApiClient

from activities.kubeapi import JSON, Kube, ListWatch, Resource

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")


@pytest.fixture
def kube_json(kube: ApiClient) -> Iterator[Kube]:
    yield Kube(kube)


def _cm(name: str, value: str) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"lw": "yes"}},
            "data": {"v": value}}



def test_a_relist_hands_over_what_changed_while_nobody_watched_deletions_first(kube_json: Kube,
                                                                               namespace: str) -> None:
    seen: list[tuple[str, str, bool]] = []
    listed_at: list[str | None] = []

    def heard(kind: str, obj: JSON, relisted: bool) -> None:
        seen.append((kind, obj["metadata"]["name"], relisted))
        listed_at.append(lw.listed_at)

    lw = ListWatch(kube_json, CONFIGMAPS, namespace, heard, label_selector="lw=yes")
    kube_json.create(CONFIGMAPS, namespace, _cm("a", "1"))
    kube_json.create(CONFIGMAPS, namespace, _cm("b", "1"))
    first = lw._list(relisted=False)
    assert sorted(seen) == [("ADDED", "a", False), ("ADDED", "b", False)]
    assert listed_at == [first, first], "each item is handed over as of its LIST's resourceVersion"
    seen.clear()
    listed_at.clear()
    kube_json.delete(CONFIGMAPS, namespace, "b")
    changed = kube_json.patch(CONFIGMAPS, namespace, "a", {"data": {"v": "2"}})
    kube_json.create(CONFIGMAPS, namespace, _cm("c", "1"))
    second = lw._list(relisted=True)
    assert seen[0] == ("DELETED", "b", True)
    assert sorted(seen[1:]) == [("ADDED", "c", True), ("MODIFIED", "a", True)]
    assert listed_at == [second] * 3, "a deletion a relist found too: its own last version is older than the LIST"
    assert int(second) >= int(changed["metadata"]["resourceVersion"]) > int(first)
    assert lw.listed_at is None and lw.relists == 1
    seen.clear()
    lw._list(relisted=True)
    assert seen == [], "an unchanged object is not handed over again"


def test_live_events_in_order_then_a_prompt_stop_without_an_error(kube_json: Kube, namespace: str) -> None:
    seen: list[tuple[str, str]] = []
    listed: list[str | None] = []
    errors: list[Exception] = []
    synced = threading.Event()

    def heard(kind: str, obj: JSON, _relisted: bool) -> None:
        seen.append((kind, obj["metadata"]["name"]))
        listed.append(lw.listed_at)

    lw = ListWatch(kube_json, CONFIGMAPS, namespace, heard, label_selector="lw=yes",
                   on_synced=lambda _items: synced.set(), on_error=lambda error, _delay: errors.append(error))
    lw.start()
    assert synced.wait(10)
    kube_json.create(CONFIGMAPS, namespace, _cm("x", "1"))
    kube_json.patch(CONFIGMAPS, namespace, "x", {"data": {"v": "2"}})
    kube_json.delete(CONFIGMAPS, namespace, "x")
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen == [("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x")]
    assert listed == [None, None, None], "watch events stand for their own versions, not a LIST's"
    began = time.monotonic()
    lw.stop(join_seconds=5)
    assert time.monotonic() - began < 2, "stop closes the open stream instead of waiting for its timeout"
    assert lw._thread is not None and not lw._thread.is_alive()
    assert errors == []
