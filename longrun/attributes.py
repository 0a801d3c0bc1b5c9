"""The search attributes a run publishes, for listing and filtering runs (the API, the Web
UI, `temporal workflow list -q`): their keys, and how a namespace registers them."""

from __future__ import annotations

from typing import Any

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunStatus")
LABELS_ATTRIBUTE = SearchAttributeKey.for_keyword_list("LongrunLabels")
PHASE_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunPhase")
STEPS_DONE_ATTRIBUTE = SearchAttributeKey.for_int("LongrunStepsDone")
STEPS_TOTAL_ATTRIBUTE = SearchAttributeKey.for_int("LongrunStepsTotal")
COST_ATTRIBUTE = SearchAttributeKey.for_float("LongrunCostUsd")
PENDING_ATTRIBUTE = SearchAttributeKey.for_int("LongrunPendingApprovals")
# Set at the start of a retry or fork: the run it starts again, whose audit then names it.
RETRY_OF_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunRetryOf")
# The tenant of the key that started the run (unset: no tenant); lists filter by it.
TENANT_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunTenant")

# A run's progress, in the order of workflows.status.Progress's fields.
PROGRESS_KEYS: tuple[SearchAttributeKey[Any], ...] = (
    STATUS_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    STEPS_DONE_ATTRIBUTE,
    STEPS_TOTAL_ATTRIBUTE,
    COST_ATTRIBUTE,
    PENDING_ATTRIBUTE,
)

_KEYS: list[SearchAttributeKey[Any]] = [
    STATUS_ATTRIBUTE,
    LABELS_ATTRIBUTE,
    PHASE_ATTRIBUTE,
    STEPS_DONE_ATTRIBUTE,
    STEPS_TOTAL_ATTRIBUTE,
    COST_ATTRIBUTE,
    PENDING_ATTRIBUTE,
    RETRY_OF_ATTRIBUTE,
    TENANT_ATTRIBUTE,
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


def start_attributes(
    labels: dict[str, str],
    retry_of: str | None = None,
    tenant: str | None = None,
    progress: tuple[str, int] | None = None,
) -> TypedSearchAttributes:
    """What a run is found by from its start: its status (running), its labels, its
    tenant if it has one, for a retry or fork the run it starts again and, given its
    `progress` (phase and steps planned), the rest of the progress it starts with."""
    listed = [f"{k}:{v}" for k, v in sorted(labels.items())]
    pairs: list[SearchAttributePair[Any]] = [
        SearchAttributePair(STATUS_ATTRIBUTE, "running"),
        SearchAttributePair(LABELS_ATTRIBUTE, listed),
    ]
    if progress is not None:
        phase, total = progress
        pairs += [
            SearchAttributePair(PHASE_ATTRIBUTE, phase),
            SearchAttributePair(STEPS_DONE_ATTRIBUTE, 0),
            SearchAttributePair(STEPS_TOTAL_ATTRIBUTE, total),
            SearchAttributePair(COST_ATTRIBUTE, 0.0),
            SearchAttributePair(PENDING_ATTRIBUTE, 0),
        ]
    if retry_of is not None:
        pairs.append(SearchAttributePair(RETRY_OF_ATTRIBUTE, retry_of))
    if tenant is not None:
        pairs.append(SearchAttributePair(TENANT_ATTRIBUTE, tenant))
    return TypedSearchAttributes(pairs)


def start_memo(
    goal: str, labels: dict[str, str], owner: str, tenant: str | None = None, **more: Any
) -> dict[str, Any]:
    """What a run's memo holds from its start: its goal, labels, owner and tenant (and
    `more`)."""
    memo = {"goal": goal, "labels": labels, "owner": owner, **more}
    return memo if tenant is None else {**memo, "tenant": tenant}
