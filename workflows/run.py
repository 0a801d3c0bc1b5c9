"""The run workflow: executes a plan's steps as activities, in dependency order, durably.

Deterministic orchestration only: every side effect is an activity, time comes from
`workflow.now()`, and configuration arrives in `RunInput`.
"""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any, Literal, NoReturn

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import SearchAttributeKey
from temporalio.exceptions import ActivityError, ApplicationError

from workflows.agent import AgentLoop
from workflows.common import (
    MODEL_TIMEOUT,
    TOOL_HEARTBEAT_TIMEOUT,
    TOOL_TIMEOUT,
    TOOL_TIMEOUT_MARGIN,
    StepFailed,
    cut,
    failure_of,
    preview,
    retry_policy,
)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: pydantic models and pure functions, no I/O at import. Passing
    # them through keeps one class identity for the pydantic data converter.
    from activities.model import ModelActivities  # for the method reference only
    from activities.tools import REGISTRY  # read for compensations and side-effect classes
    from longrun import plans
    from longrun.contracts import (
        LIVE_RUN_STATUSES,
        AgentCarry,
        ApprovalDecision,
        ApprovalKind,
        ApprovalRecord,
        AuditEntry,
        AuditTrail,
        BudgetChange,
        BudgetView,
        CancelNote,
        Compensation,
        CompletedCall,
        ControlRequest,
        LimitUse,
        ModelRequest,
        PendingApproval,
        Plan,
        RetrySpec,
        RunCarry,
        RunInput,
        RunResult,
        RunState,
        RunStatusName,
        SideEffect,
        Step,
        StepKind,
        StepQuery,
        StepState,
        StepStatusName,
        ToolCall,
        ToolResult,
        Usage,
    )

PREVIEW_CHARS = 200
AGENT_STEPS_KEPT = 100  # an agent's latest tool calls carried across continue-as-new
LISTED_OUTPUT_CHARS = 2000  # of one step's output in status; the `step` query has it all
STATUS_OUTPUT_CHARS = 500_000  # of all outputs in status together
AUDIT_DETAIL_CHARS = 1000  # of one audit entry's detail
APPROVAL_SUMMARY_CHARS = 2000
STATUS_ATTRIBUTE = SearchAttributeKey.for_keyword("LongrunStatus")
LABELS_ATTRIBUTE = SearchAttributeKey.for_keyword_list("LongrunLabels")


# Invalid data met inside the workflow fails the run with its message instead of retrying
# the workflow task forever; other exceptions (bugs) still retry, so a fix can rescue runs.
@workflow.defn(name="longrun.Run", failure_exception_types=[ValidationError])
class RunWorkflow:
    """One run: plan steps as activities, approval gates, durable waits, queryable state."""

    @workflow.init
    def __init__(self, inp: RunInput) -> None:
        self._inp = inp
        steps = inp.plan.steps if inp.plan else []
        self._steps = {s.id: StepState(id=s.id, kind=s.kind) for s in steps}
        self._agent = AgentLoop(self, inp, inp.agent) if inp.agent else None
        self._approvals: dict[str, ApprovalRecord] = {}
        # Kept up to date as steps move, so that refreshing status is O(what is in flight).
        self._undecided: dict[str, ApprovalRecord] = {}
        self._active: dict[str, None] = {}  # running steps, in start order
        self._done = 0
        self._usage = Usage()
        self._budget = inp.budget
        self._started = workflow.now()
        self._audit = [
            AuditEntry(at=self._started, actor=inp.owner, action="submitted", detail=inp.goal)
        ]
        self._pause_request: ControlRequest | None = None
        self._compensate_on_cancel = False
        self._completed_calls: list[CompletedCall] = []  # oldest first
        self._segment = 1
        self._steps_dropped = 0  # an agent's tool calls earlier segments did not carry
        self._settled_here = 0  # steps that ended in this history segment
        # Approvals a step was waiting for when the last segment handed over.
        self._resumable: dict[str, ApprovalRecord] = {}
        self._handing_over = False
        if inp.carry is not None:
            self._restore(inp.carry)
        self._pause_reason: Literal["budget", "requested"] | None = None
        self._exhausted: list[str] = []
        self._status: RunStatusName = "running"
        self._result: Any = None
        self._error: str | None = None
        # Runs started by the API carry the status search attribute and keep it current.
        # A run started without it (the time-skipping test server cannot register custom
        # attributes) skips publishing rather than failing its workflow tasks.
        self._publish_status = (
            workflow.info().typed_search_attributes.get(STATUS_ATTRIBUTE) is not None
        )

    # --- handlers ---------------------------------------------------------------------------

    @workflow.query(name="status")
    def status(self) -> RunState:
        """Where the run stands: steps, approvals, usage, result."""
        steps = list(self._steps.values())
        omitted = 0
        if self._agent is not None and len(steps) > AGENT_STEPS_KEPT:
            omitted = len(steps) - AGENT_STEPS_KEPT
            steps = steps[omitted:]
        omitted += self._steps_dropped
        # Each output gets its share of the room status has, between the preview's size
        # and LISTED_OUTPUT_CHARS.
        share = STATUS_OUTPUT_CHARS // max(1, len(steps) + len(self._result or ()))
        limit = max(PREVIEW_CHARS, min(LISTED_OUTPUT_CHARS, share))
        state = RunState(
            run_id=self._inp.run_id,
            goal=self._inp.goal,
            status=self._status,
            # Bounded, so status stays well under Temporal's payload limit however long
            # the run: big outputs are previewed, an agent's old tool calls counted.
            steps=[_listed(s, limit) for s in steps],
            steps_omitted=omitted,
            pending_approvals=[
                PendingApproval.model_validate(
                    a.model_dump(include=set(PendingApproval.model_fields))
                )
                for a in self._undecided.values()
            ],
            # Decided approvals without their arguments: those are in history and audit.
            approvals=[_decided(a) for a in self._approvals.values()],
            # A copy: a query must not change the state it reports.
            usage=self._usage.model_copy(update={"duration_s": self._elapsed_s()}),
            labels=self._inp.labels,
            result={k: _shown(v, limit) for k, v in self._result.items()}
            if self._agent is None and self._status == "completed" and self._result
            else self._result,
            error=self._error,
            budget=self._budget_view(),
            pause_reason=self._pause_reason,
            exhausted=self._exhausted,
        )
        if self._agent is not None:
            self._agent.describe(state)
        return state

    @workflow.query(name="step")
    def step(self, query: StepQuery) -> StepState | None:
        """One step in full, output included; None if the run has no such step (an agent's
        tool calls from earlier history segments are not kept)."""
        return self._steps.get(query.step_id)

    @workflow.query(name="audit")
    def audit(self) -> AuditTrail:
        """Every decision about the run, oldest first."""
        return AuditTrail(run_id=self._inp.run_id, entries=self._audit)

    @workflow.signal(name="pause")
    def pause(self, request: ControlRequest) -> None:
        """Stop before the next model or tool call (the call in flight finishes)."""
        self.record(request.actor, "pause", request.reason)
        self._pause_request = request

    @workflow.signal(name="resume")
    def resume(self, request: ControlRequest) -> None:
        """Lift a pause a person asked for (a budget pause needs a bigger budget)."""
        self.record(request.actor, "resume", request.reason)
        self._pause_request = None

    @workflow.signal(name="set_budget")
    def set_budget(self, change: BudgetChange) -> None:
        """Change limits; a run paused for its budget resumes once nothing is exhausted."""
        given = change.limits.model_dump(exclude_none=True)
        self._budget = self._budget.model_copy(update=given)
        self.record(change.actor, "budget", json.dumps(given, sort_keys=True))

    @workflow.signal(name="cancelling")
    def cancelling(self, note: CancelNote) -> None:
        """Sent just before a cancel: who cancels, and whether completed steps are undone."""
        self.record(note.actor, "cancel", "compensate" if note.compensate else None)
        self._compensate_on_cancel = note.compensate

    @workflow.signal(name="decide")
    def decide(self, decision: ApprovalDecision) -> None:
        """A person's decision on an approval request; the first decision wins."""
        record = self._approvals.get(decision.approval_id)
        if record is None or record.decision is not None:
            workflow.logger.warning(
                "ignoring decision on %s: unknown or decided", decision.approval_id
            )
            return
        del self._undecided[decision.approval_id]
        record.decision = decision.decision
        record.decided_at = workflow.now()
        record.decided_by = decision.actor
        record.comment = decision.comment
        detail = f"{record.approval_id} (step {record.step_id})"
        if decision.comment:
            detail += f": {decision.comment}"
        self.record(decision.actor, decision.decision, detail)

    # --- main loop --------------------------------------------------------------------------

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        """Run the plan (or, for a goal-only run, the agent loop) to its end."""
        self.refresh()
        try:
            if self._agent is not None:
                self._result = await self._agent.run()
            elif inp.plan is not None:
                await self._execute(inp.plan)
                depended_on = {d for s in inp.plan.steps for d in (s.depends_on or [])}
                self._result = {
                    s.id: self._steps[s.id].output
                    for s in inp.plan.steps
                    if s.id not in depended_on and self._steps[s.id].status == "completed"
                }
        except asyncio.CancelledError:
            await self._end("cancelled", "cancelled on request", self._compensate_on_cancel)
            raise
        except StepFailed as exc:
            compensate = exc.compensate or inp.on_failure == "compensate"
            await self._end("failed", str(exc), compensate)
            raise ApplicationError(str(exc), type="RunFailed", non_retryable=True) from None
        self._finish("completed", None)
        return RunResult(outputs=self._result or {})

    async def _end(self, status: RunStatusName, error: str, compensate: bool) -> None:
        """End a run early, undoing completed steps first if asked; always record the end."""
        try:
            if compensate:
                self._result = (await self._compensate()).model_dump()
        finally:
            self._finish(status, error)

    # --- continue-as-new ------------------------------------------------------------------

    def _restore(self, carry: RunCarry) -> None:
        """Take over from the previous history segment."""
        self._segment = carry.segment
        self._steps_dropped = carry.steps_dropped
        self._started = carry.started
        self._steps = {s.id: s for s in carry.steps}
        self._approvals = {a.approval_id: a for a in carry.approvals}
        self._undecided = {k: a for k, a in self._approvals.items() if a.decision is None}
        for record in self._approvals.values():
            step = self._steps.get(record.step_id)
            if step is not None and step.status == "waiting_approval":
                self._resumable[record.step_id] = record
        self._done = sum(1 for s in carry.steps if s.status in ("completed", "skipped"))
        self._usage = carry.usage
        self._budget = carry.budget
        self._audit = carry.audit
        self._completed_calls = carry.completed_calls
        self._pause_request = carry.pause_request
        self._compensate_on_cancel = carry.compensate_on_cancel

    def hand_over_due(self, settled: int) -> bool:
        """Whether to continue as new, after `settled` steps ended in this segment."""
        return (
            settled >= self._inp.config.continue_as_new_every
            or workflow.info().is_continue_as_new_suggested()
        )

    async def hand_over(
        self, running: dict[str, asyncio.Task[None]], agent: AgentCarry | None = None
    ) -> NoReturn:
        """Continue as new: stop the steps that only wait for a person (their approvals
        travel along and are waited on again), let handlers finish, pass the state on."""
        self._handing_over = True
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        # A signal that arrives after this point makes the server refuse the hand-over;
        # the task runs again with it, so no signal is lost.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self.record("longrun", "continued as new", f"segment {self._segment + 1}")
        steps = list(self._steps.values())
        dropped = self._steps_dropped
        if self._inp.plan is not None:
            # Outputs later steps refer to, and the result's, travel whole; the rest are
            # in history already and travel as previews.
            needed = self._needed_outputs(self._inp.plan)
            steps = [s if s.id in needed else _listed(s) for s in steps]
        if agent is not None:
            # An agent's tool calls are referenced by nobody later: the recent ones travel,
            # big outputs previewed, the rest are counted.
            dropped += max(0, len(steps) - AGENT_STEPS_KEPT)
            steps = [_listed(s) for s in steps[-AGENT_STEPS_KEPT:]]
        # A decided approval's arguments are in history already; its record travels on so
        # that approval ids stay unique.
        approvals = [_decided(a) for a in self._approvals.values()]
        carry = RunCarry(
            segment=self._segment + 1,
            started=self._started,
            steps=steps,
            steps_dropped=dropped,
            approvals=approvals,
            usage=self._usage,
            budget=self._budget,
            audit=self._audit,
            completed_calls=self._completed_calls,
            pause_request=self._pause_request,
            compensate_on_cancel=self._compensate_on_cancel,
            agent=agent,
        )
        workflow.continue_as_new(self._inp.model_copy(update={"carry": carry}))

    def _needed_outputs(self, plan: Plan) -> set[str]:
        """Steps whose outputs are still needed: referenced by a step yet to end, or part
        of the result (no step depends on them)."""
        depended_on = {d for s in plan.steps for d in (s.depends_on or [])}
        needed = {s.id for s in plan.steps if s.id not in depended_on}
        for step in plan.steps:
            if self._steps[step.id].status in ("pending", "running", "waiting_approval"):
                needed |= plans.referenced_steps(step)
        return needed

    # --- compensation ---------------------------------------------------------------------

    def completed_call(
        self, step_id: str, tool: str, args: dict[str, Any], output: dict[str, Any]
    ) -> None:
        """Remember a completed tool call, in case the run must undo it (read-only calls
        leave nothing to undo or to report)."""
        spec = REGISTRY[tool]
        undo = spec.undo(args, output)
        irreversible = undo is None and (
            spec.side_effect_of(spec.parse(args)) is SideEffect.IRREVERSIBLE
        )
        if undo is None and not irreversible:
            return
        self._completed_calls.append(
            CompletedCall(
                step_id=step_id,
                tool=tool,
                undo_known=True,
                undo_tool=undo[0] if undo else None,
                undo_args=undo[1] if undo else None,
                irreversible=irreversible,
            )
        )

    async def _compensate(self) -> Compensation:
        """Undo completed reversible calls once each, newest first; list what stays done."""
        outcome = Compensation()
        for call in reversed(self._completed_calls):
            step_id, tool = call.step_id, call.tool
            if call.undo_known:
                undo = (call.undo_tool, call.undo_args or {}) if call.undo_tool else None
                irreversible = call.irreversible
            else:
                spec = REGISTRY[tool]
                undo = spec.undo(call.args, call.output)
                irreversible = spec.side_effect_of(spec.parse(call.args)) is (
                    SideEffect.IRREVERSIBLE
                )
            if undo is None:
                if irreversible:
                    outcome.not_undone.append(step_id)
                    self.record("longrun", "not undone", f"{step_id}: {tool} is irreversible")
                continue
            undo_tool, undo_args = undo
            self._usage.tool_calls += 1  # counted, but never held back: undo must run
            try:
                await self.run_tool(f"{step_id}-undo", undo_tool, undo_args)
            except (ActivityError, asyncio.CancelledError) as exc:
                # A cancel that arrives while undoing is delivered once: note it, go on.
                message = "cancelled" if isinstance(exc, asyncio.CancelledError) else None
                if isinstance(exc, ActivityError):
                    try:
                        message, _ = failure_of(exc)
                    except asyncio.CancelledError:
                        message = "cancelled"
                outcome.not_undone.append(step_id)
                self.record("longrun", "not undone", f"{step_id}: {message}")
                continue
            outcome.compensated.append(step_id)
            self.record("longrun", "compensated", f"{step_id}: {undo_tool}")
        return outcome

    # --- budget, pauses, audit ----------------------------------------------------------------

    def record(self, actor: str, action: str, detail: str | None = None) -> None:
        """Add a decision to the audit trail."""
        if detail is not None:
            detail = cut(detail, AUDIT_DETAIL_CHARS)
        self._audit.append(AuditEntry(at=workflow.now(), actor=actor, action=action, detail=detail))

    def _elapsed_s(self) -> float:
        return (workflow.now() - self._started).total_seconds()

    def _used(self) -> dict[str, float]:
        u = self._usage
        return {
            "max_input_tokens": u.input_tokens,
            "max_output_tokens": u.output_tokens,
            "max_cost_usd": u.cost_usd,
            "max_model_calls": u.model_calls,
            "max_tool_calls": u.tool_calls,
            "max_duration_s": self._elapsed_s(),
        }

    def _exhausted_limits(self) -> list[str]:
        limits = self._budget.model_dump()
        return [name for name, used in self._used().items() if _reached(limits[name], used)]

    def _budget_view(self) -> BudgetView:
        limits = self._budget.model_dump()
        return BudgetView(
            limits={
                name: LimitUse(limit=limits[name], used=used) for name, used in self._used().items()
            },
            on_budget_exhausted=self._budget.on_budget_exhausted,
        )

    def _pause_snapshot(self) -> tuple[bool, list[str]]:
        return self._pause_request is None, self._exhausted_limits()

    async def _until_changed(self, seen: tuple[bool, list[str]]) -> None:
        await workflow.wait_condition(lambda: self._pause_snapshot() != seen)

    async def checkpoint(self, kind: Literal["model", "tool"]) -> None:
        """Before every model or tool call: wait out a pause, stop at an exhausted budget,
        then count the call at once, so parallel steps cannot overshoot a limit together."""
        while True:
            exhausted = self._exhausted_limits()
            if "max_duration_s" in exhausted and self._budget.on_budget_exhausted == "fail":
                raise StepFailed(
                    f"the run's time budget ({self._budget.max_duration_s:g} s) is used up"
                )
            if not exhausted and self._pause_request is None:
                if self._pause_reason is not None:
                    self._pause_reason = None
                    self._exhausted = []
                    self.refresh()
                if kind == "model":
                    self._usage.model_calls += 1
                else:
                    self._usage.tool_calls += 1
                return
            reason: Literal["budget", "requested"] = "budget" if exhausted else "requested"
            if (reason, exhausted) != (self._pause_reason, self._exhausted):
                self._pause_reason, self._exhausted = reason, exhausted
                if exhausted:
                    self.record("longrun", "paused", "budget exhausted: " + ", ".join(exhausted))
                self.refresh()
            # Wait until something that decided this pause changes, then look again.
            await self._until_changed(self._pause_snapshot())

    async def _execute(self, plan: Plan) -> None:
        steps = {s.id: s for s in plan.steps}
        # Count unmet dependencies instead of rescanning every step on each wake-up, so a
        # run of a thousand steps costs O(edges), not O(steps²). Steps an earlier history
        # segment finished count as met.
        finished = ("completed", "skipped")
        unmet = {
            s.id: sum(1 for d in s.depends_on or [] if self._steps[d].status not in finished)
            for s in steps.values()
        }
        dependents: dict[str, list[str]] = {step_id: [] for step_id in steps}
        for step in steps.values():
            for dep in step.depends_on or []:
                dependents[dep].append(step.id)
        ready = [
            step_id
            for step_id, count in unmet.items()
            if count == 0 and self._steps[step_id].status not in finished
        ]
        running: dict[str, asyncio.Task[None]] = {}
        try:
            while ready or running:
                for step_id in ready:
                    running[step_id] = asyncio.create_task(self._run_step(steps[step_id]))
                ready = []
                self.refresh()
                await workflow.wait(list(running.values()), return_when=asyncio.FIRST_COMPLETED)
                # Iterate in start order, not set order, so replay sees the same sequence.
                for step_id, task in list(running.items()):
                    if task.done():
                        del running[step_id]
                        task.result()
                        self._settled_here += 1
                        for dependent in dependents[step_id]:
                            unmet[dependent] -= 1
                            if unmet[dependent] == 0:
                                ready.append(dependent)
                # Hand over at a quiet moment: nothing running but waits for a person.
                quiet = all(self._steps[s].status == "waiting_approval" for s in running)
                if (ready or running) and quiet and self.hand_over_due(self._settled_here):
                    ready = []
                    await self.hand_over(running)
        # Not BaseException: other exceptions (eviction's among them) pass through.
        except (StepFailed, asyncio.CancelledError) as exc:
            reason = str(exc) if isinstance(exc, StepFailed) else "run cancelled"
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
            for state in self._steps.values():
                if state.status == "pending":
                    state.status = "cancelled"
                    state.error = f"not started: {reason[:200]}"
            raise

    async def _run_step(self, step: Step) -> None:
        state = self._steps[step.id]
        try:
            output = await self._perform(step, state)
        except asyncio.CancelledError:
            if not self._handing_over:  # a hand-over keeps the step waiting for its approval
                self.settle(state, "cancelled")
            raise
        except StepFailed as exc:
            self.settle(state, "failed", error=str(exc))
            message = f"step '{step.id}' failed: {exc}"
            raise StepFailed(message, compensate=exc.compensate) from None
        if output is None:
            self.settle(state, "skipped")
        else:
            self.settle(state, "completed", output=output)

    def add_step(self, step_id: str, kind: StepKind) -> StepState:
        """A new step record (one of the agent's tool calls), pending."""
        state = self._steps[step_id] = StepState(id=step_id, kind=kind)
        return state

    def start(self, state: StepState) -> None:
        """Mark a step running."""
        state.status = "running"
        state.started_at = workflow.now()
        self._active[state.id] = None
        self.refresh()

    def settle(
        self,
        state: StepState,
        status: StepStatusName,
        *,
        output: Any = None,
        error: str | None = None,
    ) -> None:
        state.status = status
        state.output = output
        state.error = error
        state.finished_at = workflow.now()
        self._active.pop(state.id, None)
        if status in ("completed", "skipped"):
            self._done += 1
        self.refresh()

    async def _perform(self, step: Step, state: StepState) -> dict[str, Any] | None:
        """Run one step; None means it was skipped after a rejection."""
        try:
            resolved = self._resolve(step)
        except plans.ReferenceError_ as exc:
            raise StepFailed(str(exc)) from None

        binding = None
        if step.tool is not None:
            binding = self._inp.config.policy.binding_approval(step.tool, resolved)
        if step.approval is not None or step.requires_approval or binding:
            summary = (
                resolved.get("message") or f"{step.kind} step '{step.id}': {preview(resolved)}"
            )
            if binding:
                summary += f" ({binding})"
            record = await self.request_approval(step.id, summary, arguments=resolved)
            if record.decision == "reject":
                if step.on_reject == "skip":
                    return None
                reason = f": {record.comment}" if record.comment else ""
                raise StepFailed(
                    f"rejected by {record.decided_by}{reason}",
                    compensate=step.on_reject == "compensate",
                )
            if step.approval is not None:
                state.started_at = state.finished_at = workflow.now()
                return {"approved_by": record.decided_by, "comment": record.comment}

        if step.wait is None:
            # A model or tool call: not while paused or over budget.
            await self.checkpoint("model" if step.model is not None else "tool")
        self.start(state)
        try:
            if step.wait is not None:
                await workflow.sleep(timedelta(seconds=step.wait.seconds))
                return {"waited_s": step.wait.seconds}
            if step.model is not None:
                return await self._call_model(step, state, resolved)
            return await self._call_tool(step, state, resolved)
        except ActivityError as exc:
            message, attempts = failure_of(exc)
            state.attempts = attempts or state.attempts
            raise StepFailed(message) from None

    def _resolve(self, step: Step) -> dict[str, Any]:
        """The step's inputs with references replaced: tool args as values, texts as text."""

        def output_of(step_id: str) -> Any:
            dep = self._steps.get(step_id)
            if dep is None:
                raise plans.ReferenceError_(f"no step '{step_id}'")
            if dep.status != "completed":
                raise plans.ReferenceError_(f"step '{step_id}' has no output (it is {dep.status})")
            return dep.output

        if step.tool is not None:
            return dict(plans.resolve(step.args, output_of))
        if step.model is not None:
            system = step.model.system
            return {
                **step.model.model_dump(),
                "prompt": plans.resolve_text(step.model.prompt, output_of),
                "system": plans.resolve_text(system, output_of) if system else None,
            }
        if step.approval is not None:
            return {"message": plans.resolve_text(step.approval.message, output_of)}
        return {}

    async def request_approval(
        self,
        step_id: str,
        summary: str,
        kind: ApprovalKind = "approval",
        arguments: Any = None,
    ) -> ApprovalRecord:
        """Ask a person and wait, however long, for the decision."""
        approval_id = f"{'help' if kind == 'needs_help' else 'apr'}-{step_id}"
        if step_id in self._resumable:  # asked before continue-as-new: wait on that request
            record = self._resumable.pop(step_id)
            self._steps[step_id].status = "waiting_approval"
            self.refresh()
            await workflow.wait_condition(lambda: record.decision is not None)
            return record
        base, n = approval_id, 1
        while approval_id in self._approvals:  # asked again about the same step
            n += 1
            approval_id = f"{base}-{n}"
        record = ApprovalRecord(
            approval_id=approval_id,
            step_id=step_id,
            summary=cut(summary, APPROVAL_SUMMARY_CHARS),
            requested_at=workflow.now(),
            kind=kind,
            arguments=arguments,
        )
        self._approvals[approval_id] = record
        self._undecided[approval_id] = record
        if step_id in self._steps:
            self._steps[step_id].status = "waiting_approval"
        self.refresh()
        await workflow.wait_condition(lambda: record.decision is not None)
        return record

    async def _call_tool(
        self, step: Step, state: StepState, args: dict[str, Any]
    ) -> dict[str, Any]:
        assert step.tool is not None
        result = await self.run_tool(
            step.id, step.tool, args, retry=step.retry, timeout_s=step.timeout_s
        )
        self.completed_call(step.id, step.tool, args, result.output)
        state.attempts = result.attempt
        return result.output

    async def run_tool(
        self,
        step_id: str,
        tool: str,
        args: dict[str, Any],
        *,
        retry: RetrySpec | None = None,
        timeout_s: float | None = None,
    ) -> ToolResult:
        """Run `tool.<name>` for a step (after `checkpoint`); raises ActivityError when it
        fails for good."""
        call = ToolCall(
            run_id=self._inp.run_id,
            step_id=step_id,
            # Stable across retries and continue-as-new: tools use it to apply an effect once.
            idempotency_key=f"{self._inp.run_id}:{step_id}",
            args=args,
        )
        limit = timedelta(seconds=timeout_s) if timeout_s else TOOL_TIMEOUT
        own = args.get("timeout_s")
        if isinstance(own, int | float):
            # Let the tool's own timeout (non-retryable) fire before Temporal's (retried), so
            # a slow command is stopped once instead of being started again.
            limit = max(limit, timedelta(seconds=own) + TOOL_TIMEOUT_MARGIN)
        result: ToolResult = await workflow.execute_activity(
            f"tool.{tool}",
            call,
            result_type=ToolResult,
            start_to_close_timeout=limit,
            heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
            retry_policy=retry_policy(retry),
            summary=f"step {step_id}: tool {tool}",
        )
        return result

    async def _call_model(
        self, step: Step, state: StepState, spec: dict[str, Any]
    ) -> dict[str, Any]:
        model = spec.get("model") or self._inp.config.default_model
        request = ModelRequest(
            run_id=self._inp.run_id,
            step_id=step.id,
            model=model,
            prompt=spec["prompt"],
            system=spec.get("system"),
            json_schema=spec.get("json_schema"),
        )
        # An answer that is not the JSON asked for comes back (its tokens counted) and is
        # asked again, up to the step's attempts; transport failures retry in Temporal.
        answers = (step.retry or RetrySpec()).max_attempts
        for answer in range(1, answers + 1):
            if answer > 1:
                await self.checkpoint("model")
            result = await workflow.execute_activity_method(
                ModelActivities.complete,
                request,
                start_to_close_timeout=timedelta(seconds=step.timeout_s)
                if step.timeout_s
                else MODEL_TIMEOUT,
                retry_policy=retry_policy(step.retry),
                summary=f"step {step.id}: model {model}",
            )
            state.attempts += result.attempt
            # Priced by the name asked for: providers answer with dated model names.
            self.add_usage(model, result.input_tokens, result.output_tokens)
            if result.json_error is None:
                break
        else:
            raise StepFailed(f"no valid JSON in {answers} answers: {result.json_error}")
        output: dict[str, Any] = {
            "text": result.text,
            "model": result.model,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
        }
        if result.json_value is not None:
            output["json"] = result.json_value
        return output

    def add_usage(self, model: str, input_tokens: int, output_tokens: int) -> None:
        """Add the tokens of a model call (counted at its checkpoint) and their price."""
        self._usage.input_tokens += input_tokens
        self._usage.output_tokens += output_tokens
        price = self._inp.config.prices.get(model)
        if price is not None:
            cost = (input_tokens * price.input + output_tokens * price.output) / 1_000_000
            self._usage.cost_usd = round(self._usage.cost_usd + cost, 6)

    # --- status -----------------------------------------------------------------------------

    def refresh(self) -> None:
        """Recompute the run status, publish it as a search attribute and in the Web UI."""
        if self._status in LIVE_RUN_STATUSES:
            status: RunStatusName = "running"
            if self._pause_reason is not None:
                status = "paused"
            elif self._undecided:
                status = "waiting_approval"
            if status != self._status:
                self._status = status
                self._publish()
        if self._agent is not None:
            details = [f"{self._status}: {self._agent.progress()}"]
        else:
            details = [f"{self._status}: {self._done}/{len(self._steps)} steps done"]
        if self._active:
            details.append("running: " + ", ".join(self._active))
        waits = [f"{a.approval_id} (step {a.step_id})" for a in self._undecided.values()]
        if waits:
            details.append("waiting for approval: " + ", ".join(waits))
        if self._error:
            details.append(f"error: {self._error}")
        workflow.set_current_details("\n".join(details))

    def _finish(self, status: RunStatusName, error: str | None) -> None:
        self._status = status
        self._error = error
        self._pause_reason = None
        self.record("longrun", status, error)
        self._undecided.clear()  # an ended run waits for nobody
        if self._agent is not None:
            self._agent.close(failed=status == "failed")
        for state in self._steps.values():
            if state.status in ("pending", "waiting_approval", "running"):
                state.status = "cancelled"
        self._publish()
        self.refresh()

    def _publish(self) -> None:
        if self._publish_status:
            workflow.upsert_search_attributes([STATUS_ATTRIBUTE.value_set(self._status)])


def _shown(value: Any, limit: int) -> Any:
    """`value`, or a preview of it when its JSON is longer than `limit` characters."""
    if value is None:
        return None
    text = json.dumps(value)
    if len(text) <= limit:
        return value
    return {"truncated": True, "chars": len(text), "preview": text[:PREVIEW_CHARS]}


def _decided(record: ApprovalRecord) -> ApprovalRecord:
    """An approval record to keep showing and carrying: once decided, without arguments."""
    if record.decision is None or record.arguments is None:
        return record
    return record.model_copy(update={"arguments": None})


def _listed(state: StepState, limit: int = LISTED_OUTPUT_CHARS) -> StepState:
    """A step as status lists it: an output too big to list becomes a preview."""
    output = _shown(state.output, limit)
    return state if output is state.output else state.model_copy(update={"output": output})


def _reached(limit: float | None, used: float) -> bool:
    return limit is not None and used >= limit
