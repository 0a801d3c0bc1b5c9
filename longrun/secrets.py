"""Where tool arguments name secrets: `{"secret": "<name>"}` anywhere in them. Only
activities read a secret's value (LONGRUN_SECRETS); what history, the API and the policy
see is the name."""

from __future__ import annotations

from typing import Any


def named(value: Any) -> list[str]:
    """The names of the secrets `value` names, in order, each once."""
    found: dict[str, None] = {}
    _collect(value, found)
    return list(found)


def _collect(value: Any, found: dict[str, None]) -> None:
    if isinstance(value, dict):
        if set(value) == {"secret"} and isinstance(value["secret"], str):
            found[value["secret"]] = None
            return
        for item in value.values():
            _collect(item, found)
    elif isinstance(value, list):
        for item in value:
            _collect(item, found)
