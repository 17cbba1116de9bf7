"""Log lines written inside an activity by our own module loggers name the workflow, PCS and replica they serve."""

from __future__ import annotations

import dataclasses
import io
import json
import logging

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from worker.logs import ActivityContextFilter, JsonFormatter

WORKFLOW_ID = "pcs/team-a/my-pcs/0f1e2d3c-uid/2"
log = logging.getLogger("activities.example")


@activity.defn(name="observe_replica")
def _observe() -> None:
    log.warning("apiserver slow")


def _capture(formatter: logging.Formatter) -> tuple[io.StringIO, logging.Handler]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(ActivityContextFilter())
    handler.setFormatter(formatter)
    log.addHandler(handler)
    return out, handler


def _environment() -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, workflow_id=WORKFLOW_ID, activity_type="observe_replica")
    return env


def test_json_lines_from_a_module_logger_in_an_activity_carry_the_replica() -> None:
    out, handler = _capture(JsonFormatter())
    try:
        _environment().run(_observe)
    finally:
        log.removeHandler(handler)
    entry = json.loads(out.getvalue())
    assert entry["message"] == "apiserver slow" and entry["workflow_id"] == WORKFLOW_ID
    assert (entry["namespace"], entry["pcs"], entry["replica"]) == ("team-a", "my-pcs", 2)
    assert entry["activity_type"] == "observe_replica"


def test_text_lines_name_the_workflow_and_lines_outside_activities_are_unchanged() -> None:
    out, handler = _capture(logging.Formatter("%(name)s:%(grove_context)s %(message)s"))
    try:
        _environment().run(_observe)
        log.warning("no activity here")
    finally:
        log.removeHandler(handler)
    assert out.getvalue().splitlines() == [f"activities.example: [{WORKFLOW_ID}] apiserver slow",
                                           "activities.example: no activity here"]
