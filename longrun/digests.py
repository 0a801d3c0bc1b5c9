"""What an approval binds to: a digest, sha256 over what will run (the tool, its resolved
arguments) and the policy in force, so a decision taken for one call is never taken for
another, after a replan, a retry or a hand-over; and, once escalated, the role that
decides it. The run checks a decision against both; the API says so at once."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from longrun.contracts import PendingApproval

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


def bound_refusal(
    asked: PendingApproval, digest: str | None, roles: Iterable[str], *, by_the_run: bool = False
) -> tuple[str, str] | None:
    """Why a decision naming `digest`, by a caller with `roles`, is not one on the request
    `asked` as it stands (its kind, "NeedsRole" or "StaleDigest", and a message), or None.
    The run's own decisions (a deadline's) need no role."""
    if asked.role != "approver" and not by_the_run and not {asked.role, "admin"} & set(roles):
        return "NeedsRole", (
            f"approval '{asked.approval_id}' was escalated: only the role {asked.role} "
            "decides it now"
        )
    if digest is not None and digest != asked.digest:
        return "StaleDigest", (
            f"approval '{asked.approval_id}' is for another call now (digest {asked.digest}, "
            f"not {digest}): look at it again and decide that"
        )
    return None
