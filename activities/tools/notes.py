"""The `note` tool: the agent keeps a fact, decision or open question in its run's journal
(activities/memory.py), for later steps to recall."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from activities.memory import Journal
from activities.tools.registry import ToolContext, tool
from longrun.contracts import SideEffect


class NoteArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=2000)
    kind: Literal["fact", "decision", "question"] = "fact"


@tool("note", args=NoteArgs, side_effect=SideEffect.READ_ONLY)
async def note(args: NoteArgs, ctx: ToolContext) -> dict[str, Any]:
    """Keep a fact, decision or open question in the run's journal for later steps."""
    journal = Journal.of(ctx.settings)
    await asyncio.to_thread(journal.add, ctx.run_id, args.kind, ctx.step_id, args.text)
    return {"kept": args.kind}
