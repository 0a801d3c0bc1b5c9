"""What runs a tool of the catalogue (longrun/catalogue.py): its implementation
(`implements`; `tool` declares and implements one added beside the built-in ones), the
context it runs with, redaction of the secrets it used, and the run's workspace. The
activities themselves are built in activities/tools/bound.py."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from activities.errors import fatal
from longrun.catalogue import CATALOGUE, Compensation, declare
from longrun.contracts import RUN_FOLDER_PATTERN, SecretGrant, SideEffect
from longrun.settings import Settings

_RUN_ID = re.compile(RUN_FOLDER_PATTERN)


ToolFn = Callable[[Any, "ToolContext"], Awaitable[dict[str, Any]]]


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use besides its arguments."""

    run_id: str
    step_id: str
    idempotency_key: str
    workspace: Path
    settings: Settings
    # Whom the run acts for and the secrets it may use.
    grant: SecretGrant = field(default_factory=SecretGrant)
    # Secret values this call has used; they are blanked out of what it returns.
    revealed: list[str] = field(default_factory=list)


def redact(value: Any, secrets: list[str]) -> Any:
    """`value` with every occurrence of the given secret values replaced."""
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, "[secret]")
        return value
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value


IMPLEMENTATIONS: dict[str, ToolFn] = {}


def implements(name: str) -> Callable[[ToolFn], ToolFn]:
    """Register `fn` as what runs the catalogue's tool `name`."""

    def register(fn: ToolFn) -> ToolFn:
        if name not in CATALOGUE:
            raise ValueError(f"tool '{name}' is not in the catalogue (longrun/catalogue.py)")
        if name in IMPLEMENTATIONS:
            raise ValueError(f"tool '{name}' is implemented twice")
        IMPLEMENTATIONS[name] = fn
        return fn

    return register


def tool(
    name: str,
    *,
    args: type[BaseModel],
    side_effect: SideEffect | Callable[[Any], SideEffect],
    compensate: Compensation | None = None,
    exposes_secrets: bool = False,
    quick: bool = False,
) -> Callable[[ToolFn], ToolFn]:
    """Declare and implement a tool in one: one added beside the built-in ones. Its
    docstring's first line describes it (see `longrun.catalogue.declare`)."""

    def register(fn: ToolFn) -> ToolFn:
        description = (fn.__doc__ or name).strip().splitlines()[0]
        declare(
            name,
            description=description,
            args=args,
            side_effect=side_effect,
            compensate=compensate,
            exposes_secrets=exposes_secrets,
            quick=quick,
        )
        return implements(name)(fn)

    return register


def workspace_of(settings: Settings, run_id: str, attempt: int = 1, used: bool = False) -> Path:
    """The run's workspace directory, created on first use. A call that finds none though
    an earlier attempt of it (`attempt` > 1) or an earlier call of the run (`used`) ran in
    it lost it: on a worker whose disk this one does not share, or a disk that is gone. The
    step would carry on from a different state; it fails and says so instead."""
    if not _RUN_ID.match(run_id):
        raise fatal(f"run id '{run_id}' cannot name a workspace")
    path = settings.workspaces_dir / run_id / "workspace"
    if (attempt > 1 or used) and not path.is_dir():
        earlier = "an earlier attempt of this step" if attempt > 1 else "an earlier step"
        raise fatal(
            f"the run's workspace is not on this worker ({path}), though {earlier} had it: "
            "workers must share LONGRUN_DATA_DIR, and a lost disk loses what the run's steps "
            "wrote",
            type="WorkspaceLost",
        )
    if not path.is_dir():  # one system call for the usual case, where it is there
        path.mkdir(parents=True, exist_ok=True)
    return path
