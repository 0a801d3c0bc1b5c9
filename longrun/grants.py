"""Which secrets a run may use. A run carries the grant of the key that started it (at most
its parent's, for a child run); the activity that reveals a secret checks that grant and,
where the worker knows the API keys, the owner's grant as it is now: a key's secrets taken
away, or the key removed, stop its runs from using them at their next call."""

from __future__ import annotations

from longrun import secrets
from longrun.contracts import RunInput, SecretGrant, ToolCheck
from longrun.settings import Settings


def named_in(inp: RunInput, steps: set[str] | None = None) -> list[str]:
    """The secrets a run's plan steps (those of `steps`; None: all) and its agent's
    acceptance checks name."""
    args = [s.args for s in inp.plan.steps if steps is None or s.id in steps] if inp.plan else []
    if inp.agent is not None:
        args += [c.check.args for c in inp.agent.acceptance if isinstance(c.check, ToolCheck)]
    return secrets.named(args)


def grant_of(inp: RunInput) -> SecretGrant:
    """The grant a run's calls carry. A run started before runs carried grants may use the
    secrets its plan and checks named when it was submitted (and checked)."""
    if inp.secrets is not None:
        return SecretGrant(owner=inp.owner, names=list(inp.secrets))
    return SecretGrant(owner=inp.owner, names=named_in(inp))


def refusal(settings: Settings, grant: SecretGrant, name: str) -> str | None:
    """Why a call carrying `grant` may not use the secret `name`, or None."""
    if not grant.allows(name):
        granted = ", ".join(grant.names) or "none"
        return (
            f"this run may not use the secret '{name}': the key '{grant.owner}' that started "
            f"it was granted {granted}"
        )
    if not settings.api_keys:  # the API admits local callers only, each granted all
        return None
    key = next((k for k in settings.api_keys if k.name == grant.owner), None)
    if key is None:
        return f"the key '{grant.owner}' that started this run is no longer configured"
    if not SecretGrant(owner=key.name, names=key.secrets).allows(name):
        return f"the key '{grant.owner}' that started this run is no longer granted '{name}'"
    return None
