"""Search attributes the workflows set, so the Temporal UI can filter replicas (registered by the local stack and
by deploy/; see README)."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey

GROVE_NAMESPACE = SearchAttributeKey.for_keyword("GroveNamespace")
GROVE_PCS = SearchAttributeKey.for_keyword("GrovePodCliqueSet")
GROVE_REPLICA = SearchAttributeKey.for_int("GroveReplica")
GROVE_PHASE = SearchAttributeKey.for_keyword("GrovePhase")
GROVE_PAUSED = SearchAttributeKey.for_bool("GrovePaused")

# name -> type as `temporal operator search-attribute create` and `temporal server start-dev` spell it
DEFINITIONS: dict[str, str] = {
    "GroveNamespace": "Keyword",
    "GrovePodCliqueSet": "Keyword",
    "GroveReplica": "Int",
    "GrovePhase": "Keyword",
    "GrovePaused": "Bool",
}
