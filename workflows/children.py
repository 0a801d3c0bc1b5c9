"""Child runs of a run: started as Temporal child workflows, their budgets carved out of
this run's ledger, their reports (status, approvals waiting, usage, what to undo) taken in.

A child tells its parent what changes (workflows/reporting.py); the parent shows its
children's waits as its own, charges what they use once (a live child its carve, an ended
one what it used), gives what a child leaves to children held short, and undoes children's
calls when it compensates. A run does not continue as new while a child runs (a child step
is never a quiet moment), so a child's parent is always the run that started it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import CancelledError, ChildWorkflowError, FailureError
from temporalio.workflow import ParentClosePolicy

from workflows.audit import AuditLog
from workflows.common import StepFailed, cut, searchable
from workflows.events import EventLog
from workflows.ledger import Ledger
from workflows.undo import UndoLog

with workflow.unsafe.imports_passed_through():
    from longrun import wire
    from longrun.attributes import start_attributes, start_memo
    from longrun.children import child_input, child_run_id
    from longrun.contracts import (
        LIVE_RUN_STATUSES,
        BudgetChange,
        ChildReport,
        ChildRun,
        ControlRequest,
        Limits,
        PauseReason,
        PendingApproval,
        RunInput,
        RunResult,
        RunSpec,
        RunStatusName,
    )

SUMMARY_CHARS = 200
CARVER = "longrun"  # who changes a child's budget when its parent's changes


class Children:
    """This run's child runs, by run id, in the order they started."""

    def __init__(
        self,
        inp: RunInput,
        ledger: Ledger,
        undo: UndoLog,
        audit: AuditLog,
        events: EventLog,
        on_change: Callable[[], None],
        tools: Callable[[], list[str]],
    ) -> None:
        self._inp = inp
        self._ledger = ledger
        self._undo = undo
        self._audit = audit
        self._events = events
        self._on_change = on_change
        self._tools = tools
        self.runs = ledger.children
        self._sends: list[asyncio.Task[None]] = []

    def restore(self, children: list[ChildRun]) -> None:
        """Take over an earlier segment's (ended) children."""
        self.runs.clear()
        self.runs.update((c.run_id, c) for c in children)

    async def run(self, step_id: str, spec: RunSpec, item: int | None = None) -> dict[str, Any]:
        """Start a child run and wait for its end: its run id and outputs; StepFailed if it
        failed or was cancelled."""
        run_id = child_run_id(self._inp.run_id, step_id, item)
        await self._ledger.unpaused()  # a paused run starts no child
        limit = self._inp.config.max_child_runs
        if len(self.runs) >= limit:
            raise StepFailed(f"the run has started {limit} child runs, the most it may")
        budget = self._ledger.carve(spec.budget)
        record = ChildRun(
            run_id=run_id, step_id=step_id, item=item, budget=budget, wants=spec.budget or Limits()
        )
        self.runs[run_id] = record
        inp = child_input(self._inp, spec, run_id, budget, self._tools())
        self._audit.record("longrun", "child run", f"{run_id} (step {step_id})", event=False)
        self._events.emit("child.started", step_id, run_id=run_id, item=item, goal=spec.goal)
        self._on_change()
        try:
            handle = await workflow.start_child_workflow(
                wire.RUN_WORKFLOW,
                inp,
                id=run_id,
                result_type=RunResult,
                parent_close_policy=ParentClosePolicy.REQUEST_CANCEL,
                search_attributes=start_attributes(inp.labels, tenant=inp.tenant)
                if searchable()
                else None,
                memo=start_memo(
                    inp.goal, inp.labels, inp.owner, inp.tenant, parent_run_id=self._inp.run_id
                ),
                static_summary=cut(spec.goal, SUMMARY_CHARS),
            )
            result: RunResult = await handle
        except ChildWorkflowError as exc:
            status, message = _ending(exc)
            self._ended(record, status)
            raise StepFailed(f"child run {run_id} {status}: {message}") from None
        self._ended(record, "completed")
        return {"run_id": run_id, "outputs": result.outputs}

    def _ended(self, record: ChildRun, status: RunStatusName) -> None:
        """Mark a child ended. One that ended without its final report (terminated from
        outside) is charged what it last reported."""
        if record.status in LIVE_RUN_STATUSES:
            record.status = status
            record.pending_approvals = []
            self.regrant()
        self._on_change()

    def report(self, report: ChildReport) -> None:
        """Take a child's report; older ones (by `seq`) are ignored."""
        record = self.runs.get(report.run_id)
        if record is None or report.seq <= record.seq:
            return
        record.seq = report.seq
        record.status = report.status
        record.pause_reason = report.pause_reason
        record.usage = report.usage
        record.pending_approvals = [
            a if a.run_id else a.model_copy(update={"run_id": report.run_id})
            for a in report.pending_approvals
        ]
        if report.final:
            record.pending_approvals = []
            for call in report.undo:
                self._undo.calls.append(
                    call if call.run_id else call.model_copy(update={"run_id": report.run_id})
                )
            self._events.emit(
                "child.ended", record.step_id, run_id=report.run_id, status=report.status
            )
            self.regrant()
        self._on_change()

    def regrant(self) -> None:
        """Give children held short what this run has left (after its limits change or a
        child ends)."""
        for run_id, limits in self._ledger.regrant():
            self._send(run_id, wire.SET_BUDGET, BudgetChange(limits=limits, actor=CARVER))

    def pass_on(self, signal: str, request: ControlRequest) -> None:
        """Pause or resume the live children as this run was (the request is theirs
        without its id: each child takes it as it comes)."""
        reason = f"{request.reason} (through {self._inp.run_id})" if request.reason else None
        passed = ControlRequest(actor=request.actor, reason=reason or f"through {self._inp.run_id}")
        for child in self.runs.values():
            if child.status in LIVE_RUN_STATUSES:
                self._send(child.run_id, signal, passed)

    def _send(self, run_id: str, signal: str, payload: BudgetChange | ControlRequest) -> None:
        async def send() -> None:
            try:
                await workflow.get_external_workflow_handle(run_id).signal(signal, payload)
            except FailureError as exc:  # it has ended meanwhile: nothing to tell
                workflow.logger.info("child run %s not sent %s: %s", run_id, signal, exc)

        self._sends.append(asyncio.create_task(send()))

    async def settle(self) -> None:
        """Wait until every signal sent to a child (budget, pause, resume) is delivered."""
        while self._sends:
            sends, self._sends = self._sends, []
            await asyncio.gather(*sends)

    def pending(self) -> list[PendingApproval]:
        """What waits for a person in the live children."""
        return [
            a
            for c in self.runs.values()
            if c.status in LIVE_RUN_STATUSES
            for a in c.pending_approvals
        ]

    def held(self) -> PauseReason | None:
        """Why a live child holds (budget first), if one does."""
        reasons = {c.pause_reason for c in self.runs.values() if c.status in LIVE_RUN_STATUSES}
        order: tuple[PauseReason, ...] = ("budget", "requested", "model_unavailable", "stalled")
        return next((r for r in order if r in reasons), None)

    def listed(self) -> list[ChildRun]:
        """Every child, as status shows them."""
        return list(self.runs.values())


def _ending(exc: ChildWorkflowError) -> tuple[RunStatusName, str]:
    """How a child ended, and why, from the error its parent got."""
    cause = exc.cause
    if isinstance(cause, CancelledError):
        return "cancelled", "cancelled"
    message = str(cause) if cause is not None else str(exc)
    return "failed", message or "failed"
