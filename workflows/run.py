"""The run workflow: a plan's steps, or a goal's agent loop, run durably to their end.

Deterministic orchestration only: every side effect is an activity, time comes from
`workflow.now()`, and configuration arrives in `RunInput`. The workflow holds the handlers
and composes the run's parts (workflows.parts); the plan scheduler and the agent loop do
the work through them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from functools import partial
from typing import Any, TypeVar

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ApplicationError

from workflows.agent import AgentLoop
from workflows.changes import baseline_retired, changed
from workflows.common import StepFailed
from workflows.final_record import record_final
from workflows.handover import HandOver
from workflows.ledger import Ledger
from workflows.parts import RunParts
from workflows.result import bounded
from workflows.scheduler import PlanScheduler
from workflows.status import TemporalDisplay

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: pydantic models and constants, no I/O at import. Passing them
    # through keeps one class identity for the pydantic data converter.
    from longrun import wire
    from longrun.contracts import (
        ApprovalDecision,
        ApprovalRecord,
        AuditTrail,
        Budget,
        BudgetChange,
        BudgetView,
        CancelNote,
        ChildReport,
        CompletedCall,
        ControlRequest,
        EventPage,
        EventsQuery,
        GrantOutcome,
        RequestOutcome,
        RunFigures,
        RunInput,
        RunResult,
        RunState,
        RunStatusName,
        StepQuery,
        StepState,
    )

T = TypeVar("T")

# What a run that took a request waits before it ends (`answered-before-the-end`).
ANSWER_GAP = timedelta(milliseconds=1)


# Invalid data met inside the workflow fails the run with its message instead of retrying
# the workflow task forever; other exceptions (bugs) still retry, so a fix can rescue runs.
# On a versioned worker a run is pinned to the version it started on: the worker's default
# (longrun/versions.py), as an unversioned worker may send no versioning behavior at all.
@workflow.defn(name=wire.RUN_WORKFLOW, failure_exception_types=[ValidationError])
class RunWorkflow:
    """One run: plan steps as activities, approval gates, durable waits, queryable state."""

    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        if not inp.run_id:  # started by a schedule, which names each run it starts
            inp = inp.model_copy(update={"run_id": workflow.info().workflow_id})
        self._p = RunParts(inp, workflow.now, TemporalDisplay())
        for step in inp.plan.steps if inp.plan else []:
            self._p.steps.add(step.id, step.kind)
        self._handover = HandOver(self._p)
        self._agent = AgentLoop(self._p, self._handover, inp.agent) if inp.agent else None
        self._p.status.agent = self._agent.state if self._agent else None
        if inp.carry is not None:
            self._handover.restore(inp.carry)
        elif inp.reuse is not None:  # a retry: what the retried run did is done
            self._p.steps.take_over(inp.reuse.steps)
            taken = self._p.steps.done
            if inp.reuse.agent is not None:
                taken = inp.reuse.agent.index
            self._p.audit.record(
                inp.owner,
                "retry",
                f"of {inp.reuse.run_id}: its {taken} completed steps are taken over, not run again",
            )

    # --- handlers ---------------------------------------------------------------------------

    @workflow.query(name=wire.STATUS)
    def status(self) -> RunState:
        """Where the run stands: steps, approvals, usage, result."""
        return self._p.status.state()

    @workflow.query(name=wire.STEP)
    def step(self, query: StepQuery) -> StepState | None:
        """One step in full, output included; None if the run has no such step (an agent's
        tool calls from earlier history segments are not kept)."""
        return self._p.steps.by_id.get(query.step_id)

    @workflow.query(name=wire.EVENTS)
    def events(self, query: EventsQuery) -> EventPage:
        """The run's events after `query.after`, oldest first (see workflows/events.py)."""
        return self._p.events.page(query)

    @workflow.query(name=wire.AUDIT)
    def audit(self) -> AuditTrail:
        """Every decision about the run, oldest first."""
        audit = self._p.audit
        return AuditTrail(run_id=self._p.inp.run_id, entries=audit.entries, archived=audit.archived)

    # Requests people send (the API gives each an id and reads its outcome back): the
    # first of competing requests is taken, every other one refused, saying why.

    @workflow.query(name=wire.OUTCOME)
    def outcome(self, request_id: str) -> RequestOutcome | None:
        """Whether the run took a request, and if not, why; None if it has not seen it."""
        return self._p.requests.outcome(request_id)

    @workflow.signal(name=wire.PAUSE)
    def pause(self, request: ControlRequest) -> None:
        """Stop before the next model or tool call (the call in flight finishes); child
        runs pause too."""
        take = partial(self._control, wire.PAUSE, self._p.ledger.pause, request)
        if request.request_id is None:  # as runs before request ids did
            take()
            return
        self._p.requests.handle(request.request_id, self._p.ledger.pause_refusal(), take)

    @workflow.signal(name=wire.RESUME)
    def resume(self, request: ControlRequest) -> None:
        """Lift a pause a person asked for, or one for an unavailable model (a budget pause
        needs a bigger budget); child runs resume too."""
        take = partial(self._control, wire.RESUME, self._p.ledger.resume, request)
        if request.request_id is None:
            take()
            return
        self._p.requests.handle(request.request_id, self._p.ledger.resume_refusal(), take)

    def _control(
        self, signal: str, apply: Callable[[ControlRequest], None], request: ControlRequest
    ) -> None:
        apply(request)
        self._p.children.pass_on(signal, request)

    @workflow.signal(name=wire.SET_BUDGET)
    def set_budget(self, change: BudgetChange) -> None:
        """Change limits; a run paused for its budget resumes once nothing is exhausted, and
        child runs held short get what it now has left."""
        take = partial(self._limits, change)
        if change.request_id is None:
            take()
            return
        self._p.requests.handle(change.request_id, None, take)

    def _limits(self, change: BudgetChange) -> None:
        self._p.ledger.set_limits(change.limits, change.actor)
        self._p.children.regrant()

    @workflow.signal(name=wire.GRANT_ANSWER)
    def grant_answer(self, answer: GrantOutcome) -> None:
        """The grants workflow's answer: may a call run under a standing approval?"""
        self._p.standing.answer(answer)

    @workflow.signal(name=wire.CHILD)
    def child(self, report: ChildReport) -> None:
        """A child run's report: its status, what waits in it, what it used."""
        self._p.children.report(report)

    @workflow.signal(name=wire.CANCELLING)
    def cancelling(self, note: CancelNote) -> None:
        """Sent just before a cancel: who cancels, and whether completed steps are undone."""
        self._p.audit.record(note.actor, "cancel", "compensate" if note.compensate else None)
        self._p.undo.compensate_on_cancel = note.compensate

    @workflow.signal(name=wire.DECIDE)
    def decide(self, decision: ApprovalDecision) -> None:
        """A person's decision on an approval request; the first decision wins, and the
        others are refused, naming it."""
        approvals, requests = self._p.approvals, self._p.requests
        if decision.request_id is not None:
            refusal = approvals.refusal(decision)
            unknown = refusal is not None and refusal[0] == "UnknownApproval"
            if unknown and not decision.unseen:
                requests.defer(decision)  # taken once the run asks (see Requests.defer)
                return
            requests.handle(decision.request_id, refusal, partial(approvals.decide, decision))
        elif not approvals.decide(decision):
            workflow.logger.warning(
                "ignoring decision on %s: unknown or decided", decision.approval_id
            )

    # Updates: what the API used before it sent requests as signals; kept for clients and
    # runs of earlier versions. An update that reaches a workflow task a dead worker left
    # to time out can be recorded in an order that does not replay (the SDK's), which is
    # why the API no longer sends them.

    @workflow.update(name="decide_approval")
    def decide_approval(self, decision: ApprovalDecision) -> ApprovalRecord:
        """A person's decision on an approval request; returns the decided request."""
        record = self._p.approvals.decide(decision)
        if record is None:  # the validator lets through only what decide takes
            raise ApplicationError("decision not taken", type="AlreadyDecided")
        return record

    @decide_approval.validator
    def _may_decide(self, decision: ApprovalDecision) -> None:
        _refuse(self._p.approvals.refusal(decision))

    @workflow.update(name="pause_run")
    def pause_run(self, request: ControlRequest) -> None:
        """Stop before the next model or tool call; refused if already paused."""
        self._p.ledger.pause(request)

    @pause_run.validator
    def _may_pause(self, request: ControlRequest) -> None:
        _refuse(self._p.ledger.pause_refusal())

    @workflow.update(name="resume_run")
    def resume_run(self, request: ControlRequest) -> None:
        """Lift a pause asked for, or one for an unavailable model; refused otherwise."""
        self._p.ledger.resume(request)

    @resume_run.validator
    def _may_resume(self, request: ControlRequest) -> None:
        _refuse(self._p.ledger.resume_refusal())

    @workflow.update(name="change_budget")
    def change_budget(self, change: BudgetChange) -> BudgetView:
        """Change limits; returns the budget as it is after this change."""
        self._p.ledger.set_limits(change.limits, change.actor)
        return self._p.ledger.view()

    # --- the run ----------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        """Run the plan (or, for a goal-only run, the agent loop) to its end."""
        p = self._p
        inp = p.inp  # with its run id
        p.refresh()
        try:
            if inp.reuse is not None and inp.reuse.undo and inp.carry is None:
                await self._compensate_first(inp.reuse.run_id, inp.reuse.undo)
            if self._agent is not None:
                p.status.result = await self._in_time(self._agent.run())
            elif inp.plan is not None:
                scheduler = PlanScheduler(p, self._handover, inp.plan)
                outputs = await self._in_time(scheduler.run())
                # Well under the payload limit: the biggest outputs travel as references.
                p.status.result = await bounded(inp.run_id, outputs)
        except asyncio.CancelledError:
            await self._end("cancelled", "cancelled on request", p.undo.compensate_on_cancel)
            raise
        except StepFailed as exc:
            compensate = exc.compensate or inp.on_failure == "compensate"
            await self._end("failed", str(exc), compensate)
            raise ApplicationError(str(exc), type="RunFailed", non_retryable=True) from None
        await self._answered_first()
        ending = self._finish("completed", None)
        await record_final(p, ending)
        await p.webhooks.settle()
        await p.children.settle()
        await p.reporting.final(p.undo.calls)
        return RunResult(outputs=p.status.result or {})

    async def _compensate_first(self, run_id: str, calls: list[CompletedCall]) -> None:
        """A fork that compensates first: undo the calls of the forked run's steps that run
        again, newest first, before anything else."""
        p = self._p
        undone = await p.undo.compensate(p.calls, p.ledger, calls)
        detail = f"in {run_id}: " + (", ".join(undone.compensated) or "nothing")
        if undone.not_undone:
            detail += f"; not undone: {', '.join(undone.not_undone)}"
        p.audit.record(p.inp.owner, "compensated first", detail)

    async def _in_time(self, work: Coroutine[Any, Any, T]) -> T:
        """Do the run's work; a time budget that fails the run ends it when time is up,
        also while it waits for a person or a timer (calls check it themselves)."""
        baseline_retired()
        task = asyncio.create_task(work)
        ledger = self._p.ledger
        try:
            while not task.done():
                # Until the work ends, its limits change or a call waited on recovery (each
                # sets the clock again).
                moved = partial(_moved, task, ledger, ledger.budget, ledger.usage.recovering_s)
                try:
                    await workflow.wait_condition(moved, timeout=ledger.time_left())
                except TimeoutError:
                    await self._stop(task, ledger.time_up())
                    raise StepFailed(ledger.time_up()) from None
        except asyncio.CancelledError:  # the run is cancelled: so is its work
            await self._stop(task, "run cancelled")
            raise
        return task.result()

    async def _stop(self, task: asyncio.Task[Any], reason: str) -> None:
        """Cancel the run's work and wait until it has stopped: tool calls in flight end
        first (cancelled, or done if too late to stop, and then undone with the rest), and
        no call starts after."""
        self._p.ledger.stopping = reason
        task.cancel(reason)
        await asyncio.gather(task, return_exceptions=True)

    async def _end(self, status: RunStatusName, error: str, compensate: bool) -> None:
        """End a run early, undoing completed steps first if asked; always record the end.
        A child run leaves what it did not undo to its parent, which undoes it if it
        compensates."""
        p = self._p
        try:
            if compensate:
                outcome = await p.undo.compensate(p.calls, p.ledger)
                p.status.result = outcome.model_dump()
            await self._answered_first()
        finally:
            ending = self._finish(status, error)
        await record_final(p, ending)
        await p.webhooks.settle()
        await p.children.settle()
        await p.reporting.final([] if compensate else p.undo.calls)

    async def _answered_first(self) -> None:
        """End in a workflow task of its own if the run took any request, so the request's
        outcome is answered from memory (`answered-before-the-end`)."""
        if self._p.requests.outcomes and changed("answered-before-the-end"):
            await workflow.sleep(ANSWER_GAP, summary="answer the request before the run ends")

    def _finish(self, status: RunStatusName, error: str | None) -> dict[str, Any]:
        """Record the run's end; returns what its memo is still to hold (runs started with
        `one-memo-at-end` write it with the final record, in one upsert)."""
        p = self._p
        p.status.status = status
        p.status.error = error
        p.ledger.end()
        p.audit.record("longrun", status, error, event=False)
        p.events.emit("run.ended", status=status, error=error)
        _count_end(status, p.events.figures, p.ledger.usage.cost_usd, p.ledger.elapsed_s())
        # Where task metrics read an ended run's figures without replaying it.
        baseline_retired()
        ending: dict[str, Any] = {
            "outcome": status,
            "figures": p.events.figures.model_dump(),
            "cost_usd": p.ledger.usage.cost_usd,
            "duration_s": round(p.ledger.elapsed_s(), 3),
        }
        if not changed("one-memo-at-end"):
            workflow.upsert_memo(ending)
            ending = {}
        p.approvals.close()
        if self._agent is not None:
            self._agent.state.close(failed=status == "failed")
        p.steps.cancel_open()
        p.status.publish(final=True)
        p.refresh()
        return ending


def _count_end(status: str, figures: RunFigures, cost_usd: float, duration_s: float) -> None:
    """Record a run's end in the worker's metrics (Prometheus at LONGRUN_METRICS_ADDRESS);
    the SDK's meter records nothing while a run replays."""
    meter = workflow.metric_meter().with_additional_attributes({"outcome": status})
    meter.create_counter("longrun_runs_ended", "runs that ended, by outcome").add(1)
    if figures.met_failure():
        meter.create_counter(
            "longrun_runs_met_failure", "ended runs that met a failure, by outcome"
        ).add(1)
    meter.create_counter("longrun_interventions", "times a person stepped in").add(
        figures.interventions()
    )
    meter.create_histogram_float("longrun_run_duration", "run duration", "s").record(duration_s)
    meter.create_histogram_float("longrun_run_cost", "run cost", "usd").record(cost_usd)
    # Drift, as the task metrics have it: each a count, so rates come from PromQL.
    for name, help_text in [
        ("verifications", "an agent's step verifications"),
        ("failed_verifications", "an agent's step verifications that failed"),
        ("premature_completions", "claims of the goal met while a criterion failed"),
        ("replans", "plans an agent made again"),
    ]:
        meter.create_counter(f"longrun_{name}", help_text).add(getattr(figures, name))


def _refuse(refusal: tuple[str, str] | None) -> None:
    """Reject an update, its kind as the error type the API maps to a status code."""
    if refusal is not None:
        kind, message = refusal
        raise ApplicationError(message, type=kind, non_retryable=True)


def _moved(task: asyncio.Task[Any], ledger: Ledger, seen: Budget, recovering: float) -> bool:
    return task.done() or ledger.budget is not seen or ledger.usage.recovering_s != recovering
