"""Artifact references: how a value stored in the artifact store travels in history.

A reference is `{"artifact": "sha256:…", "bytes": n, "preview": "…"}`. Stored text reads
back as that text; a stored JSON value (`"json": true`) reads back as the value, and a
reference into part of one names the part (`"path": [keys or list indices]`). Inside text a
reference is the marker `⟦artifact:sha256:…⟧`, with the path after it when there is one
(`⟦artifact:sha256:….items.0⟧`). Workflows only move references; activities read them back
(longrun.artifacts.ArtifactStore.expand).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

_KEYS = {"artifact", "bytes", "preview"}
MARKER = re.compile(r"⟦artifact:(sha256:[0-9a-f]{64})((?:\.[A-Za-z0-9_-]+)*)⟧")


def is_ref(value: Any) -> bool:
    """Whether `value` is an artifact reference (to text, a JSON value, or part of one)."""
    if not isinstance(value, dict) or not set(value) >= _KEYS:
        return False
    extra = set(value) - _KEYS
    return not extra or (value.get("json") is True and extra <= {"json", "path"})


def json_ref(artifact: str, size: int, preview: str) -> dict[str, Any]:
    """A reference to a stored JSON value."""
    return {"artifact": artifact, "bytes": size, "preview": preview, "json": True}


def within(ref: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    """A reference to the part at `path` of the JSON value `ref` names; None when `ref`
    is a reference to text, which has no parts."""
    if ref.get("json") is not True:
        return None
    return {**ref, "path": [*ref.get("path", []), *path]}


def marker(ref: dict[str, Any]) -> str:
    """The reference written inside text."""
    path = "".join(f".{part}" for part in ref.get("path", []))
    return f"⟦artifact:{ref['artifact']}{path}⟧"


def part(value: Any, path: list[str], where: str) -> Any:
    """The value at `path` (keys, or list indices as digits) inside `value`; LookupError
    naming `where` and the missing field when there is none."""
    for key in path:
        if isinstance(value, Mapping) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            raise LookupError(f"{where}: no field '{key}'")
    return value


def read_back(ref: dict[str, Any], data: bytes) -> Any:
    """The value a reference stands for, given the stored bytes."""
    text = data.decode(errors="replace")
    if ref.get("json") is not True:
        return text
    return part(json.loads(text), ref.get("path", []), ref["artifact"])


def as_text(value: Any) -> str:
    """A value written into text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)
