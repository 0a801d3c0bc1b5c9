"""The undo log: completed tool calls a run would undo, and compensation, which undoes
them newest first and lists what stays done."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.audit import AuditLog
from workflows.calls import Calls
from workflows.common import failure_of
from workflows.ledger import Ledger

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: the toolbox is read for undo calls and side-effect classes.
    from longrun.catalogue import AnyTool
    from longrun.contracts import Compensation, CompletedCall, SideEffect


class UndoLog:
    """Completed calls that change the world, oldest first; read-only ones leave nothing."""

    def __init__(self, audit: AuditLog, tools: Mapping[str, AnyTool]) -> None:
        self._audit = audit
        self._tools = tools
        self.calls: list[CompletedCall] = []
        self.compensate_on_cancel = False

    def restore(self, calls: list[CompletedCall], compensate_on_cancel: bool) -> None:
        """Take over an earlier segment's log."""
        self.calls = calls
        self.compensate_on_cancel = compensate_on_cancel

    def remember(
        self, step_id: str, tool: str, args: dict[str, Any], output: dict[str, Any]
    ) -> None:
        """Note a completed tool call with its undo call, worked out now (so the log keeps
        the undo's arguments, not the call's); an irreversible one is noted to report."""
        spec = self._tools[tool]
        undo = spec.undo(args, output)
        irreversible = undo is None and spec.side_effect_for(args) is SideEffect.IRREVERSIBLE
        if undo is None and not irreversible:
            return
        self.calls.append(
            CompletedCall(
                step_id=step_id,
                tool=tool,
                undo_known=True,
                undo_tool=undo[0] if undo else None,
                undo_args=undo[1] if undo else None,
                irreversible=irreversible,
            )
        )

    async def compensate(
        self, calls: Calls, ledger: Ledger, log: list[CompletedCall] | None = None
    ) -> Compensation:
        """Undo completed reversible calls (this run's, or those of `log`) once each,
        newest first; list what stays done."""
        outcome = Compensation()
        for call in reversed(self.calls if log is None else log):
            step_id, tool = call.step_id, call.tool
            if call.undo_known:
                undo = (call.undo_tool, call.undo_args or {}) if call.undo_tool else None
                irreversible = call.irreversible
            else:  # a record of an older run: its undo is worked out now
                spec = self._tools[tool]
                undo = spec.undo(call.args, call.output)
                irreversible = spec.side_effect_for(call.args) is SideEffect.IRREVERSIBLE
            if undo is None:
                if irreversible:
                    outcome.not_undone.append(step_id)
                    self._audit.record(
                        "longrun", "not undone", f"{step_id}: {tool} is irreversible"
                    )
                continue
            undo_tool, undo_args = undo
            ledger.count_undo()
            try:
                await calls.tool(f"{step_id}-undo", undo_tool, undo_args, run_id=call.run_id)
            except (ActivityError, asyncio.CancelledError) as exc:
                # A cancel that arrives while undoing is delivered once: note it, go on.
                message = "cancelled" if isinstance(exc, asyncio.CancelledError) else None
                if isinstance(exc, ActivityError):
                    try:
                        message, _ = failure_of(exc)
                    except asyncio.CancelledError:
                        message = "cancelled"
                outcome.not_undone.append(step_id)
                self._audit.record("longrun", "not undone", f"{step_id}: {message}")
                continue
            outcome.compensated.append(step_id)
            where = f" (child run {call.run_id})" if call.run_id else ""
            self._audit.record("longrun", "compensated", f"{step_id}: {undo_tool}{where}")
        return outcome
