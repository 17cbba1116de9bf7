"""The status mirror of rolling updates is additive: a snapshot recorded before rolling updates existed (no template
hashes) mirrors exactly what it did then, with the same fingerprint, so recorded histories decide the same writes."""

from __future__ import annotations

import hashlib
import json

from workflows import presentation
from workflows.messages import CliqueState, ObjectStatusMirror


def old_digest(mirror: ObjectStatusMirror) -> str:
    """The fingerprint as computed before ObjectStatusMirror had `texts`."""
    data = mirror.model_dump(mode="json")
    data.pop("texts")
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def test_a_mirror_without_rollout_fields_keeps_its_fingerprint() -> None:
    mirror = ObjectStatusMirror(kind="PodClique", name="p-0-a", uid="u", fields={"replicas": 2})
    assert presentation.digest(mirror) == old_digest(mirror)


def test_rollout_fields_only_from_snapshots_that_know_the_template() -> None:
    old = CliqueState(uid="u", pods=2, ready=2)
    assert presentation.rollout_fields(old) == {} and presentation.rollout_texts(old) == {}
    rolling = CliqueState(uid="u", pods=2, ready=2, target_hash="abc", outdated={"p-0-a-1": "x"})
    assert presentation.rollout_fields(rolling) == {"updatedReplicas": 1}
    assert presentation.rollout_texts(rolling) == {}  # not every pod runs the target yet
    done = CliqueState(uid="u", pods=2, ready=2, target_hash="abc")
    assert presentation.rollout_fields(done) == {"updatedReplicas": 2}
    assert presentation.rollout_texts(done) == {"currentPodTemplateHash": "abc"}
    with_texts = ObjectStatusMirror(kind="PodClique", name="p-0-a", texts=presentation.rollout_texts(done))
    assert presentation.digest(with_texts) != presentation.digest(with_texts.model_copy(update={"texts": {}}))
