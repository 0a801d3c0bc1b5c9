"""The `note` tool: the agent keeps a fact, decision or open question in its run's journal
(activities/memory.py), for later steps to recall."""

from __future__ import annotations

import asyncio
from typing import Any

from activities.memory import Journal
from activities.tools.registry import ToolContext, implements
from longrun.catalogue import NoteArgs


@implements("note")
async def note(args: NoteArgs, ctx: ToolContext) -> dict[str, Any]:
    """Keep a fact, decision or open question in the run's journal for later steps."""
    journal = Journal.of(ctx.settings)
    await asyncio.to_thread(journal.add, ctx.run_id, args.kind, ctx.step_id, args.text)
    return {"kept": args.kind}
