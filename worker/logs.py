"""Logging set-up: text for people, JSON for log pipelines. Temporal's workflow and activity loggers attach the
workflow id, run id and activity type to each record (`temporal_workflow`, `temporal_activity` extras); the JSON
formatter keeps them, so every line about a replica can be found by its workflow id at 3 a.m."""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

from temporalio import activity

from workflows.contract import parse_replica_workflow_id

_EXTRAS = ("temporal_workflow", "temporal_activity")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in _EXTRAS:
            value = getattr(record, key, None)
            if isinstance(value, dict):
                entry.update({k: v for k, v in value.items() if k in ("workflow_id", "run_id", "activity_type",
                                                                      "workflow_type", "attempt")})
        replica = parse_replica_workflow_id(str(entry.get("workflow_id", "")))
        if replica is not None:  # one replica's lines, findable by namespace, PCS and index
            entry.update(namespace=replica.namespace, pcs=replica.pcs, replica=replica.replica)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class ActivityContextFilter(logging.Filter):
    """Lines of our own module loggers inside an activity carry the workflow they serve, as Temporal's do.

    `activities/` logs through plain module loggers (shared helpers do not know they run in an activity); without
    this their lines name no workflow, PCS or replica. Temporal's own loggers put the context into the message text
    already, so the text suffix is left off for them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "temporal_activity", None) is None and activity.in_activity():
            info = activity.info()
            record.temporal_activity = {"workflow_id": info.workflow_id, "run_id": info.workflow_run_id,
                                        "activity_type": info.activity_type, "attempt": info.attempt}
        context = getattr(record, "temporal_activity", None) or getattr(record, "temporal_workflow", None)
        workflow_id = context.get("workflow_id") if isinstance(context, dict) else None
        ours = not record.name.startswith("temporalio")
        record.grove_context = f" [{workflow_id}]" if workflow_id and ours else ""
        return True


def _drop_transport_retries(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Retrying (")


def configure_logging(level: str = "INFO", fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ActivityContextFilter())
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s:%(grove_context)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    # urllib3 warns once per transport retry of every request ("Retrying (Retry(total=2, ...)) after connection
    # broken by ..."): three lines a request through an outage, which the activity's own line already reports.
    logging.getLogger("urllib3.connectionpool").addFilter(_drop_transport_retries)
