"""The agent's memory: the rolling summary older progress is folded into, and the run's
journal of notes (written by verified steps, recalled by relevance)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.agent.state import AgentState
from workflows.common import failure_of
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: method references and pydantic models.
    from activities.model import ModelActivities
    from longrun.contracts import AgentSpec, CompactRequest, CompactResult

COMPACT_AT = 12  # finished steps listed in full before the oldest are summarized
KEEP_RECENT = 4  # finished steps still listed in full after compaction
SUMMARY_CHARS = 2000


class Memory:
    """Keeps what the agent knows of its progress small however long the run."""

    def __init__(self, parts: RunParts, spec: AgentSpec, state: AgentState) -> None:
        self._parts = parts
        self._spec = spec
        self._state = state

    async def compact_if_due(self) -> None:
        """Fold the oldest finished steps into the rolling summary once the list is long;
        each step's own note stays in the journal."""
        state = self._state
        if len(state.notes) <= COMPACT_AT:
            return
        entries = state.notes[:-KEEP_RECENT]
        await self._parts.ledger.checkpoint("model")  # a pause or exhausted budget holds here
        try:
            result: CompactResult = await self._parts.calls.execute(
                ModelActivities.compact,
                CompactRequest(
                    run_id=self._parts.inp.run_id,
                    model=self._spec.actor_model,
                    goal=self._parts.inp.goal,
                    summary=state.summary,
                    entries=entries,
                    max_chars=SUMMARY_CHARS,
                ),
                summary=f"compact {len(entries)} steps",
            )
        except ActivityError as exc:
            # A summary is a convenience: without one, keep the newest text that fits.
            message, _ = failure_of(exc)
            workflow.logger.warning("compaction failed, summary cut instead: %s", message)
            summary = ""
        else:
            self._parts.ledger.count(result.usage)
            summary = result.summary.strip()
        if not summary:
            summary = "\n".join([state.summary, *entries]).strip()
            if len(summary) > SUMMARY_CHARS:
                summary = "…" + summary[-(SUMMARY_CHARS - 1) :]
        state.summary = summary
        state.notes = state.notes[-KEEP_RECENT:]
