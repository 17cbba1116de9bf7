"""The replica workflow keeps its durable memory in one object, ReplicaState, which continue-as-new carries whole:
an attribute kept anywhere else would be silently lost at the next continue-as-new."""

from __future__ import annotations

from workflows.messages import ReplicaInput, ReplicaRef, ReplicaState
from workflows.replica import ReplicaWorkflow

REF = ReplicaRef(namespace="ns", pcs="p", pcs_uid="uid", replica=0)
# Set once from the input, never changed by the run.
FROM_INPUT = {"input", "ref"}


def test_every_public_attribute_of_the_workflow_is_its_input_or_its_state() -> None:
    wf = ReplicaWorkflow(ReplicaInput(ref=REF))
    public = {name for name in vars(wf) if not name.startswith("_")}
    assert public == FROM_INPUT | {"state"}


def test_continue_as_new_carries_the_whole_state_and_counts_the_run() -> None:
    state = ReplicaState(paused=True, pause_reason="maintenance", incarnation=3, terminations_total=2,
                         mirrored={"p-0-a": "digest"}, announced_breaches={"p-0-a": "t"}, runs=4)
    wf = ReplicaWorkflow(ReplicaInput(ref=REF, carry=state))
    wf.state.mirrored["p-0-b"] = "other"  # changed in place by a round
    carried = wf._next_input().carry
    assert carried is not None
    expected = wf.state.model_dump()
    expected["runs"] = 5
    assert carried.model_dump() == expected
    assert state.mirrored == {"p-0-a": "digest"}, "the input's state is not shared with the running workflow"


def test_continue_as_new_carries_what_the_run_was_nudged_about_and_had_not_read() -> None:
    """The nudge protocol is the one piece of run state outside ReplicaState (it is rebuilt by reads); what no read
    can rebuild, nudges already spent and how far cached reads had got, goes into the carry."""
    from datetime import UTC, datetime

    from workflows.messages import Nudge, NudgeCarry, PcsState, ReplicaSnapshot

    wf = ReplicaWorkflow(ReplicaInput(ref=REF))
    wf._nudges.timed = wf._nudges.versioned = True
    now = datetime.now(UTC)
    wf._nudges.observed(ReplicaSnapshot(read_at=now, read_from=now, pcs_state=PcsState.PRESENT, from_cache=True,
                                        read_versions={"PodClique": 10414}), None)
    wf._nudges.received(Nudge(sent_at=now, versions={"PodClique": 10450}))
    carried = wf._next_input().carry
    assert carried is not None
    assert carried.nudges == NudgeCarry(unread={"PodClique": 10450}, floor={"PodClique": 10414}, fresh=False)


def test_a_carry_from_newer_code_is_read_without_the_fields_this_code_does_not_know() -> None:
    """A worker rollback: the run was begun by a newer worker whose ReplicaState (and RolloutState) gained fields,
    at the top and deeper down. Read through the worker's own data converter, the known fields survive and the
    unknown ones are dropped, instead of failing the run's first workflow task."""
    import json

    from temporalio.api.common.v1 import Payload
    from temporalio.contrib.pydantic import pydantic_data_converter

    from workflows.messages import NudgeCarry
    from workflows.rollout_messages import RolloutInput

    state = ReplicaState(paused=True, incarnation=3, nudges=NudgeCarry(unread={"Pod": 7}), runs=2)
    wire = json.loads(ReplicaInput(ref=REF, carry=state).model_dump_json())
    wire["carry"]["added_later"] = {"x": 1}
    wire["carry"]["nudges"]["added_later_too"] = True
    wire["carry"]["memory"]["and_deeper"] = []
    converter = pydantic_data_converter.payload_converter
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(wire).encode())
    read = converter.from_payload(payload, ReplicaInput)
    assert read.carry == state

    rollout = json.loads(RolloutInput(ref={"namespace": "ns", "pcs": "p", "pcs_uid": "uid"},
                                      state={"target_hash": "h", "seq": 4}).model_dump_json())
    rollout["state"]["added_later"] = 1
    payload = Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(rollout).encode())
    assert converter.from_payload(payload, RolloutInput).state.seq == 4


def test_messages_stay_strict_about_fields_they_do_not_know() -> None:
    """Only carried state is read leniently: a signal or an input field nobody knows is still refused by name."""
    import pytest
    from pydantic import ValidationError

    from workflows.messages import Nudge

    with pytest.raises(ValidationError, match="sent_at_typo"):
        Nudge.model_validate({"sent_at": "2026-11-26T00:00:00Z", "sent_at_typo": 1})
    with pytest.raises(ValidationError, match="carry_typo"):
        ReplicaInput.model_validate({"ref": REF.model_dump(), "carry_typo": {}})


def test_a_snapshot_whose_read_wrote_nothing_travels_as_the_previous_release_wrote_it() -> None:
    """During a rolling update of the workers, a worker of the previous release (its models forbid unknown fields)
    decodes results a new worker produced: a snapshot that mirrored nothing, as every materialisation's and every read
    of a run begun before mirror-with-read is, carries no `mirrored` key; one that did round-trips whole."""
    import json
    from datetime import UTC, datetime

    from temporalio.contrib.pydantic import pydantic_data_converter

    from workflows.messages import EnsureResult, MirroredWithRead, PcsState, ReplicaSnapshot

    converter = pydantic_data_converter.payload_converter
    plain = ReplicaSnapshot(read_at=datetime(2026, 11, 29, tzinfo=UTC), pcs_state=PcsState.PRESENT)
    for value in (plain, EnsureResult(snapshot=plain)):
        wire = json.loads(converter.to_payload(value).data)
        assert "mirrored" not in json.dumps(wire), wire
    wrote = plain.model_copy(update={"mirrored": MirroredWithRead(digests={"p-0-a": "ab"}, replica_available=True)})
    assert converter.from_payload(converter.to_payload(wrote), ReplicaSnapshot) == wrote
