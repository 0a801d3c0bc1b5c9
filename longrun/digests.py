"""The digest an approval binds to: sha256 over what will run (the tool, its resolved
arguments) and the policy in force, so a decision taken for one call is never taken for
another, after a replan, a retry or a hand-over."""

from __future__ import annotations

import hashlib
import json
from typing import Any

DIGEST_PATTERN = r"^[0-9a-f]{64}$"


def call_digest(tool: str | None, arguments: Any, policy: str, what: str = "") -> str:
    """The digest of a call of `tool` (None: a gate or a question that runs nothing, then
    `what` is asked) with `arguments`, under the policy whose digest is `policy`."""
    canonical = json.dumps(
        {"tool": tool, "arguments": arguments, "policy": policy, "what": what},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()
