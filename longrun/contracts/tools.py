"""The tool activities' boundary: input and output of every `tool.<name>` activity."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class ToolCall(BaseModel):
    """Input of every `tool.<name>` activity."""

    run_id: str
    step_id: str
    idempotency_key: str
    args: dict[str, Any] = Field(default_factory=dict)


class ToolResult(BaseModel):
    """Output of every `tool.<name>` activity."""

    output: dict[str, Any]
    attempt: int = 1
