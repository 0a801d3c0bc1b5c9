"""Shared by every boundary: the strict base of request and signal bodies, the id and label
patterns, run and step status names, step kinds, approval decisions and kinds, an agent's phases,
and what a tool call does to the world.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, StringConstraints

# The ids the API gives runs; a schedule's runs add the time each was due (Temporal's naming);
# a child run adds the step that started it (and, in a `for_each`, its item), up to three
# levels deep.
RUN_ID_PATTERN = (
    r"^run-[0-9a-f]{32}(-\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)?(:[a-z0-9_-]{1,64}(:\d{1,4})?){0,3}$"
)
# What a run id may hold where it names a folder or key prefix (artifacts, workspaces,
# journals): no `/`, `.` or empty name, so it can never leave its own.
RUN_FOLDER_PATTERN = r"^[A-Za-z0-9_:-]{1,255}$"
STEP_ID_PATTERN = r"^[a-z0-9_-]{1,64}$"
LABEL_KEY_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,62}$"
LABEL_VALUE_PATTERN = r"^[A-Za-z0-9_.-]{1,63}$"

StepId = Annotated[str, StringConstraints(pattern=STEP_ID_PATTERN)]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_PATTERN)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN)]

# What an API key may do (api/access.py); an approval names the role that may decide it.
Role = Literal["viewer", "submitter", "approver", "admin"]

RunStatusName = Literal["running", "waiting_approval", "paused", "completed", "failed", "cancelled"]
LIVE_RUN_STATUSES: frozenset[str] = frozenset({"running", "waiting_approval", "paused"})
FINAL_RUN_STATUSES: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
StepStatusName = Literal[
    "pending", "running", "waiting_approval", "completed", "failed", "skipped", "cancelled"
]
StepKind = Literal["tool", "model", "wait", "approval", "run", "for_each"]
Decision = Literal["approve", "reject"]
ApprovalKind = Literal["approval", "needs_help", "stalled"]
# Why a run holds: its budget, a person's pause, a model that stayed unavailable, or an
# agent that made no progress (the watchdog).
PauseReason = Literal["budget", "requested", "model_unavailable", "stalled"]
Phase = Literal["planning", "acting", "verifying", "replanning", "completing"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SideEffect(StrEnum):
    """What a tool call does to the world, which decides whether it is gated."""

    READ_ONLY = "read_only"
    REVERSIBLE = "reversible"
    IRREVERSIBLE = "irreversible"
