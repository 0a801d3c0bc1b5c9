"""Which standing approval covers a call: pure rules the grants workflow applies when a run
asks (workflows/grants.py) and the API shows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from longrun.contracts.standing import ArgMatch, Grant, GrantUse, Prefix


def ended(grant: Grant, now: datetime) -> str | None:
    """Why a grant covers nothing any more (revoked, expired, used up), or None."""
    if grant.revoked_at is not None:
        return f"revoked by {grant.revoked_by}"
    if grant.expires_at is not None and now >= grant.expires_at:
        return "expired"
    if grant.uses_left is not None and grant.uses_left <= 0:
        return "used up"
    return None


def _matches(match: ArgMatch, present: bool, value: Any) -> bool:
    if isinstance(match, Prefix):
        return present and isinstance(value, str) and value.startswith(match.prefix)
    return present and value == match.equals


def covers(grant: Grant, use: GrantUse, now: datetime) -> bool:
    """Whether `grant` lets `use` run without asking: live, the same tenant and tool, the
    run it names or a run with its label, every argument it names matching, and (where
    four eyes were on) not a run of the one who gave it."""
    if ended(grant, now) is not None or grant.tool != use.tool or grant.tenant != use.tenant:
        return False
    if grant.run_id is not None and grant.run_id != use.run_id:
        return False
    if grant.label is not None:
        key, _, value = grant.label.partition(":")
        if use.labels.get(key) != value:
            return False
    if grant.four_eyes and grant.granted_by == use.owner:
        return False
    return all(
        _matches(match, name in use.args, use.args.get(name)) for name, match in grant.args.items()
    )
