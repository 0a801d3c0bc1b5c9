"""The search attributes a run publishes, for listing and filtering runs (the API, the Web
UI, `temporal workflow list -q`): their keys, and how a namespace registers them."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.common import SearchAttributeKey

STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunStatus")
LABELS_ATTRIBUTE = SearchAttributeKey.for_keyword_list("LongrunLabels")
PHASE_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunPhase")
STEPS_DONE_ATTRIBUTE = SearchAttributeKey.for_int("LongrunStepsDone")
STEPS_TOTAL_ATTRIBUTE = SearchAttributeKey.for_int("LongrunStepsTotal")
COST_ATTRIBUTE = SearchAttributeKey.for_float("LongrunCostUsd")
PENDING_ATTRIBUTE = SearchAttributeKey.for_int("LongrunPendingApprovals")

_KEYS: list[SearchAttributeKey[Any]] = [
    STATUS_ATTRIBUTE,
    LABELS_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    STEPS_DONE_ATTRIBUTE,
    STEPS_TOTAL_ATTRIBUTE,
    COST_ATTRIBUTE,
    PENDING_ATTRIBUTE,
]
# As the `temporal` CLI names each type.
_CLI_NAMES = {"KEYWORD": "Keyword", "KEYWORD_LIST": "KeywordList", "INT": "Int", "DOUBLE": "Double"}

# Name -> type, as Temporal's operator service registers them.
SEARCH_ATTRIBUTES = {
    key.name: IndexedValueType.Value(f"INDEXED_VALUE_TYPE_{key.indexed_value_type.name}")
    for key in _KEYS
}


def search_attribute_flags() -> list[str]:
    """`temporal server start-dev` arguments that register longrun's search attributes."""
    flags: list[str] = []
    for key in _KEYS:
        flags += ["--search-attribute", f"{key.name}={_CLI_NAMES[key.indexed_value_type.name]}"]
    return flags
