"""The agent loop of a goal-only run: plan, act, verify, replan, complete.

All decisions are made here, deterministically; every model call, tool call and check is an
activity. The loop refuses to call a run complete until every acceptance criterion passes.
Each step's conversation starts fresh from a short brief (goal, criteria, the plan around
the step, a rolling summary, the last finished steps); `model.act` adds the journal's notes
relevant to the step and keeps the prompt within a token budget (longrun.context). Older
progress is folded into the summary by `context.compact`, and the loop continues as new
between steps, so neither prompts nor history grow with the length of the run.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError
from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.common import (
    MODEL_TIMEOUT,
    TOOL_HEARTBEAT_TIMEOUT,
    StepFailed,
    cut,
    failure_of,
    preview,
    retry_policy,
)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: method references, pure prompt text, pydantic models, and the
    # tool registry (read for argument schemas and side-effect classes only).
    from activities.memory import MemoryActivities
    from activities.model import ModelActivities
    from activities.tools import REGISTRY
    from activities.verify import VerifyActivities
    from longrun import prompts
    from longrun.contracts import (
        ActRequest,
        ActResult,
        AgentCarry,
        AgentPlan,
        AgentSpec,
        Brief,
        CheckRequest,
        CompactRequest,
        CompactResult,
        Criterion,
        CriterionState,
        ModelUsage,
        Note,
        NoteWrite,
        Phase,
        PlanAttempt,
        PlanItem,
        PlanRequest,
        Recall,
        RecallRequest,
        RunInput,
        RunState,
        ToolCallRequest,
        ToolCheck,
        Verdict,
    )

if TYPE_CHECKING:
    from workflows.run import RunWorkflow

VERIFY_TIMEOUT = timedelta(minutes=10)
MEMORY_TIMEOUT = timedelta(seconds=30)
RECALL_NOTES = 5
# Runs started before the journal existed replay without its activities.
MEMORY_PATCH = "agent-memory"
# Runs started before briefs, compaction and continue-as-new replay the way they ran.
CONTEXT_PATCH = "agent-context"
COMPACT_AT = 12  # finished steps listed in full before the oldest are summarized
KEEP_RECENT = 4  # finished steps still listed in full after compaction
SUMMARY_CHARS = 2000
CARRIED_SUMMARY_CHARS = 100  # of a step's intent and summary far behind the current one
MAX_ARGUMENT_CHARS = 200_000
TOOL_RESULT_CHARS = 32_000  # of a tool result in history (its big fields are references)
OBSERVATION_CHARS = 1500
ECHOED_ARGUMENT_CHARS = 2000  # of a tool call's arguments, in the step's later turns
OBSERVATIONS_KEPT = 8
NOTES_KEPT = 10
PLAN_WINDOW = 5  # plan steps shown on each side of the current one


def describe_criterion(criterion: Criterion) -> str:
    """A criterion as a person (or a model) reads it."""
    check = criterion.check
    if isinstance(check, ToolCheck):
        expect = check.expect.model_dump(exclude_none=True)
        return f"{criterion.id}: {check.tool} {preview(check.args)} must give {preview(expect)}"
    return f"{criterion.id}: {check.judge}"


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI `tools` entry for a registered tool."""
    spec = REGISTRY[name]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": spec.description,
            "parameters": spec.args_model.model_json_schema(),
        },
    }


class AgentLoop:
    """Drives a model through a goal until its acceptance criteria verifiably pass."""

    def __init__(self, run: RunWorkflow, inp: RunInput, spec: AgentSpec) -> None:
        self._run = run
        self._inp = inp
        self._spec = spec
        self.plan: list[PlanItem] = []
        self.phase: Phase = "planning"
        self.acceptance = [
            CriterionState(id=c.id, kind="tool" if isinstance(c.check, ToolCheck) else "judge")
            for c in spec.acceptance
        ]
        self.replans = 0
        self.premature_completions = 0
        self._turns = 0
        self._tool_calls = 0
        self._notes: list[str] = []
        self._observations: list[str] = []  # the current step's tool results, newest last
        self._current: PlanItem | None = None
        self._last_check: str | None = None
        self._offered = [tool_schema(name) for name in spec.tools] + [prompts.FINISH_TOOL]
        self._summary = ""  # rolling summary of progress older than self._notes
        self._context = False  # set once the run knows it assembles prompts from briefs
        self._verified_here = 0  # plan steps verified in this history segment
        self._index = 0  # the plan step the loop is on
        self._feedback: str | None = None  # for the step's next attempt
        carried = inp.carry.agent if inp.carry is not None else None
        self._resumed = carried is not None
        if carried is not None:
            self._restore(carried)
        self._turns_at_start = self._turns

    def _restore(self, carry: AgentCarry) -> None:
        self.plan = carry.plan
        self._index = carry.index
        self._feedback = carry.feedback
        self.acceptance = carry.acceptance
        self.replans = carry.replans
        self.premature_completions = carry.premature_completions
        self._turns = carry.turns
        self._tool_calls = carry.tool_calls
        self._notes = carry.progress
        self._summary = carry.summary
        self.phase = "acting"
        if self.plan:  # past the last step, the last one's summary is the run's claim
            self._current = self.plan[min(self._index, len(self.plan) - 1)]

    def _compact_plan(self) -> list[PlanItem]:
        """A copy of the plan in which steps far behind the current one keep a short
        summary and no verification (the journal has both), so it stays small to carry
        and to show however long the plan."""
        plan = [item.model_copy() for item in self.plan]
        for item in plan[: max(0, self._index - PLAN_WINDOW)]:
            item.intent = cut(item.intent, CARRIED_SUMMARY_CHARS)
            item.expected_evidence = ""
            if item.summary:
                item.summary = cut(item.summary, CARRIED_SUMMARY_CHARS)
            item.verification = None
            item.guidance = []
        return plan

    def _carry(self) -> AgentCarry:
        """The loop's state for the next history segment."""
        return AgentCarry(
            plan=self._compact_plan(),
            index=self._index,
            feedback=self._feedback,
            acceptance=self.acceptance,
            replans=self.replans,
            premature_completions=self.premature_completions,
            turns=self._turns,
            tool_calls=self._tool_calls,
            progress=self._notes,
            summary=self._summary,
        )

    # --- what status shows --------------------------------------------------------------------

    def describe(self, state: RunState) -> None:
        """Add the agent's view to a status answer."""
        state.phase = self.phase
        state.plan = self._compact_plan()
        state.acceptance = [c.model_copy() for c in self.acceptance]
        state.replans = self.replans
        state.premature_completions = self.premature_completions

    def progress(self) -> str:
        """One line for the Web UI's current details."""
        line = f"{self.phase}"
        if self._current is not None and self._current in self.plan:
            k = self.plan.index(self._current) + 1
            line += f", step {k} of {len(self.plan)} ({self._current.id})"
        if self._last_check:
            line += f"\nlast verification: {self._last_check}"
        return line

    def close(self, failed: bool) -> None:
        """Settle plan steps left open when the run ends early."""
        for item in self.plan:
            if item.status == "pending":
                item.status = "cancelled"
            elif item.status in ("running", "waiting_approval"):
                item.status = "failed" if failed else "cancelled"

    def _enter(self, phase: Phase) -> None:
        self.phase = phase
        self._run.refresh()

    # --- the loop -----------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        """Plan, then work through the plan until the goal is verifiably met."""
        self._context = workflow.patched(CONTEXT_PATCH)
        if not self._resumed:
            self.plan = await self._make_plan(context=None)
        while True:
            # Between steps is the quiet moment to hand over: no call or approval is open.
            # (Only after progress here, a verified step or at least a turn, so a segment
            # always moves the run forward.)
            progressed = self._verified_here or self._turns > self._turns_at_start
            if self._context and progressed and self._run.hand_over_due(self._verified_here):
                await self._run.hand_over({}, agent=self._carry())
            if self._index == len(self.plan):
                # The plan is done, which claims the goal is met: prove it.
                failures = await self._check_acceptance()
                if not failures:
                    return self._result()
                self.premature_completions += 1
                self.plan.append(
                    PlanItem(
                        id=f"fix-{self.premature_completions}",
                        intent="Make the failing acceptance criteria pass",
                        expected_evidence=failures[:2000],
                    )
                )
                continue
            item = self._current = self.plan[self._index]
            item.status = "running"
            if await self._act(item, self._feedback):
                item.status = "completed"
                for later in self.plan[self._index + 1 :]:
                    later.status = "skipped"
                return self._result()
            verdict = await self._verify_step(item)
            item.verification = verdict.evidence[:2000]
            if verdict.passed:
                item.status = "completed"
                self._notes.append(f"{item.id}: {item.summary}")
                self._verified_here += 1
                if self._context:
                    await self._compact_if_due()
                elif workflow.patched(MEMORY_PATCH):
                    await self._keep(item.id, "summary", f"{item.intent}: {item.summary}")
                self._index += 1
                self._feedback = None
                continue
            item.attempts += 1
            self._feedback = f"Verification of this step failed: {verdict.evidence[:2000]}"
            if item.attempts < self._spec.max_verify_attempts:
                continue
            if self.replans < self._spec.max_replans:
                self.replans += 1
                item.status = "failed"
                context = self._replan_context(item, verdict.evidence)
                fresh = await self._make_plan(context=context)
                for new in fresh:
                    new.id = f"r{self.replans}-{new.id}"[:64]
                self.plan[self._index + 1 :] = fresh
                self._index += 1
                self._feedback = None
                continue
            self._feedback = await self._ask_for_help(item, verdict.evidence)
            item.attempts = 0
            item.status = "running"

    def _result(self) -> dict[str, Any]:
        return {
            "summary": self._current.summary if self._current else None,
            "acceptance": {c.id: c.evidence for c in self.acceptance},
        }

    def _replan_context(self, item: PlanItem, why: str) -> str:
        if self._context:  # bounded however many steps are done
            done = [f"(summary) {self._summary}"] if self._summary else []
            done += self._notes
        else:
            done = [f"{p.id}: {p.summary}" for p in self.plan if p.status == "completed"]
        return (
            f"Done so far:\n{prompts.bullet(done)}\n\n"
            f"Step '{item.id}' ({item.intent}) failed verification "
            f"{item.attempts} times: {why}\nPlan the remaining work differently."
        )

    async def _ask_for_help(self, item: PlanItem, why: str) -> str:
        item.status = "waiting_approval"
        record = await self._run.request_approval(
            item.id,
            f"Needs help: step '{item.id}' ({item.intent}) keeps failing verification after "
            f"{self.replans} replans: {why[:500]}. Approve with guidance in the comment to "
            "continue, or reject to fail the run.",
            kind="needs_help",
        )
        if record.decision == "reject":
            reason = f": {record.comment}" if record.comment else ""
            raise StepFailed(
                f"step '{item.id}' kept failing verification and {record.decided_by} "
                f"declined to help{reason}"
            )
        item.guidance.append(f"{record.decided_by}: {record.comment or '(no comment)'}")
        return f"Last failure: {why[:2000]}"

    # --- planning -----------------------------------------------------------------------------

    async def _make_plan(self, context: str | None) -> list[PlanItem]:
        self._enter("planning" if context is None else "replanning")
        error: str | None = None
        for _ in range(self._spec.max_plan_attempts):
            attempt: PlanAttempt = await self._activity(
                ModelActivities.plan,
                PlanRequest(
                    run_id=self._inp.run_id,
                    model=self._spec.planner_model,
                    goal=self._inp.goal,
                    criteria=[describe_criterion(c) for c in self._spec.acceptance],
                    tools=self._spec.tools,
                    context=context,
                    previous_error=error,
                ),
                summary="plan" if context is None else f"replan {self.replans}",
            )
            self._count(attempt.usage)
            error = attempt.error or _duplicate_ids(attempt.plan)
            if error is None and attempt.plan is not None:
                ids = ", ".join(s.id for s in attempt.plan.steps)
                self._run.record("planner", "plan" if context is None else "replan", ids)
                return [
                    PlanItem(id=s.id, intent=s.intent, expected_evidence=s.expected_evidence)
                    for s in attempt.plan.steps
                ]
        raise StepFailed(
            f"the planner gave no valid plan in {self._spec.max_plan_attempts} attempts; "
            f"last problem: {error}"
        )

    # --- acting -------------------------------------------------------------------------------

    def _plan_window(self, item: PlanItem) -> list[str]:
        """The plan around the current step; the rest is counted, so the brief stays the
        same size however long the plan."""
        at = self.plan.index(item) if item in self.plan else 0
        start, end = max(0, at - PLAN_WINDOW), at + PLAN_WINDOW + 1
        lines = [f"[{p.status}] {p.id}: {p.intent}" for p in self.plan[start:end]]
        if start:
            done = sum(1 for p in self.plan[:start] if p.status == "completed")
            lines.insert(0, f"... {start} earlier steps ({done} completed)")
        if end < len(self.plan):
            lines.append(f"... {len(self.plan) - end} more steps")
        return lines

    def _brief(self, item: PlanItem, feedback: str | None) -> str:
        plan = self._plan_window(item)
        parts = [
            f"Goal: {self._inp.goal}",
            "Acceptance criteria:\n"
            + prompts.bullet([describe_criterion(c) for c in self._spec.acceptance]),
            f"Plan:\n{prompts.bullet(plan)}",
            f"Notes from finished steps:\n{prompts.bullet(self._notes[-NOTES_KEPT:])}",
            f"Your step now: {item.id}: {item.intent}\nExpected evidence: {item.expected_evidence}",
        ]
        if item.guidance:  # kept for every later attempt at this step
            parts.append("Guidance from people:\n" + prompts.bullet(item.guidance))
        if feedback:
            parts.append(feedback)
        return "\n\n".join(parts)

    def _new_brief(self, item: PlanItem, feedback: str | None) -> Brief:
        return Brief(
            goal=self._inp.goal,
            criteria=[describe_criterion(c) for c in self._spec.acceptance],
            plan=self._plan_window(item),
            summary=self._summary,
            progress=self._notes,
            step=f"{item.id}: {item.intent}\nExpected evidence: {item.expected_evidence}",
            guidance=item.guidance,
            feedback=feedback,
            recall=f"{item.intent} {item.expected_evidence}",
            token_budget=self._inp.config.prompt_token_budget,
        )

    async def _act(self, item: PlanItem, feedback: str | None) -> bool:
        """Work on one step until the model says it is done; True if `finish` was proven."""
        self._enter("acting")
        brief: Brief | None = None
        messages: list[dict[str, Any]] = []
        if self._context:
            # model.act puts the prompt together; history carries the brief and this
            # step's turns only.
            brief = self._new_brief(item, feedback)
        else:
            text = self._brief(item, feedback)
            if workflow.patched(MEMORY_PATCH):
                recalled = await self._recall(f"{item.intent} {item.expected_evidence}")
                if recalled:
                    text += "\n\nNotes from the journal that may matter here:\n" + (
                        prompts.bullet(recalled)
                    )
            messages = [
                {"role": "system", "content": prompts.ACTOR},
                {"role": "user", "content": text},
            ]
        self._observations = []
        for _ in range(self._spec.max_turns_per_step):
            if self._turns >= self._spec.max_steps:
                raise StepFailed(
                    f"max_steps ({self._spec.max_steps}) used up before the goal was verifiably met"
                )
            self._turns += 1
            result: ActResult = await self._activity(
                ModelActivities.act,
                ActRequest(
                    run_id=self._inp.run_id,
                    step_id=item.id,
                    model=self._spec.actor_model,
                    messages=messages,
                    tools=self._offered,
                    brief=brief,
                ),
                summary=f"act: {item.id} (turn {self._turns})",
            )
            self._count(result.usage)
            messages.append(_assistant_message(result))
            if not result.tool_calls:
                item.summary = (result.content or "").strip()[:1000] or "(no summary)"
                return False
            for call in result.tool_calls:
                if call.name == "finish":
                    item.summary = _finish_summary(call)
                    failures = await self._check_acceptance()
                    if not failures:
                        return True
                    self.premature_completions += 1
                    self._enter("acting")
                    reply = f"Not finished: these acceptance criteria fail:\n{failures}"
                else:
                    reply = await self._call_tool(item, call)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": reply})
        item.summary = f"stopped after {self._spec.max_turns_per_step} turns without a summary"
        return False

    async def _call_tool(self, item: PlanItem, call: ToolCallRequest) -> str:
        """Run one tool call the model asked for; the answer is what the model is told."""
        self._tool_calls += 1
        step_id = f"{item.id}-t{self._tool_calls}"
        policy = self._inp.config.policy
        if call.name not in self._spec.tools or not policy.allows(call.name):
            state = self._run.add_step(step_id, "tool")
            refusal = (
                f"refused: '{call.name}' is not in this run's tools"
                if policy.allows(call.name)
                else f"refused: '{call.name}' is forbidden by the server's policy"
            )
            self._run.settle(state, "skipped", error=refusal)
            self._run.record("longrun", "refused", f"{step_id}: {refusal}")
            allowed = ", ".join(self._spec.tools) or "(none)"
            return (
                f"Refused ({refusal}): the tool is not allowed in this run, so nothing ran. "
                f"Allowed tools: {allowed}."
            )
        spec = REGISTRY[call.name]
        try:
            if len(call.arguments) > MAX_ARGUMENT_CHARS:
                raise ValueError(f"longer than {MAX_ARGUMENT_CHARS} characters")
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("not an object")
            if _names_a_secret(args):
                raise ValueError("secrets are for plan steps written by people, not for agents")
            parsed = spec.args_model.model_validate(args)
        except (ValueError, ValidationError, RecursionError) as exc:
            return f"Invalid arguments for {call.name}, nothing ran: {str(exc)[:2000]}"

        state = self._run.add_step(step_id, "tool")
        if policy.needs_approval(call.name, args, spec.side_effect_of(parsed)):
            why = policy.binding_approval(call.name, args)
            record = await self._run.request_approval(
                step_id,
                f"agent step '{item.id}' wants to run {call.name} {preview(args)}"
                + (f" ({why})" if why else ""),
                arguments={"tool": call.name, "args": args},
            )
            if record.decision == "reject":
                self._run.settle(state, "skipped", error=f"rejected by {record.decided_by}")
                comment = f": {record.comment}" if record.comment else ""
                return f"A person rejected this call{comment}. Find another way."
        await self._run.checkpoint("tool")
        self._run.start(state)
        try:
            result = await self._run.run_tool(step_id, call.name, args)
        except ActivityError as exc:
            message, attempts = failure_of(exc)
            state.attempts = attempts
            self._run.settle(state, "failed", error=message)
            self._observe(f"{call.name} {preview(args)} failed: {message}")
            return f"The tool failed: {message}"
        state.attempts = result.attempt
        self._run.completed_call(step_id, call.name, args, result.output)
        self._run.settle(state, "completed", output=result.output)
        text = json.dumps(result.output)
        self._observe(f"{call.name} {preview(args)} -> {text[:OBSERVATION_CHARS]}")
        # Big fields are artifact references here; model.act reads them back in, within
        # its own limit, so history keeps only the references.
        return text if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + "…"

    def _observe(self, line: str) -> None:
        self._observations = [*self._observations[-(OBSERVATIONS_KEPT - 1) :], line]

    # --- verifying ----------------------------------------------------------------------------

    async def _verify_step(self, item: PlanItem) -> Verdict:
        self._enter("verifying")
        verdict: Verdict = await self._activity(
            VerifyActivities.step,
            CheckRequest(
                run_id=self._inp.run_id,
                check_id=item.id,
                goal=self._inp.goal,
                statement=f"This step is done: {item.intent}. "
                f"Expected evidence: {item.expected_evidence}",
                observations=f"The agent's summary: {item.summary}\nTool results:\n"
                + prompts.bullet(self._observations),
                judge_model=self._spec.judge_model,
                journal=Note(kind="summary", step=item.id, text=f"{item.intent}: {item.summary}")
                if self._context
                else None,
            ),
            summary=f"verify: {item.id}",
            limit=VERIFY_TIMEOUT,
        )
        self._count(verdict.usage)
        self._last_check = f"{item.id}: {'passed' if verdict.passed else 'failed'}"
        return verdict

    async def _check_acceptance(self) -> str:
        """Check every criterion; the failures as text, empty when all pass."""
        self._enter("completing")
        summary = self._current.summary if self._current else None
        observations = (
            f"The agent's claim: {summary}\nNotes from finished steps:\n"
            + prompts.bullet(self._notes[-NOTES_KEPT:])
        )
        if self._summary:
            observations = f"Progress summary: {self._summary}\n{observations}"
        failures = []
        for criterion, state in zip(self._spec.acceptance, self.acceptance, strict=True):
            check = criterion.check
            verdict: Verdict = await self._activity(
                VerifyActivities.acceptance,
                CheckRequest(
                    run_id=self._inp.run_id,
                    check_id=criterion.id,
                    goal=self._inp.goal,
                    tool_check=check if isinstance(check, ToolCheck) else None,
                    statement=None if isinstance(check, ToolCheck) else check.judge,
                    observations=observations,
                    judge_model=self._spec.judge_model,
                ),
                summary=f"acceptance: {criterion.id}",
                limit=VERIFY_TIMEOUT,
                kind="tool" if isinstance(check, ToolCheck) else "model",
            )
            self._count(verdict.usage)
            state.status = "passed" if verdict.passed else "failed"
            state.evidence = verdict.evidence[:2000]
            if not verdict.passed:
                failures.append(f"{criterion.id}: {verdict.evidence}")
        passed = len(self.acceptance) - len(failures)
        self._last_check = f"acceptance {passed}/{len(self.acceptance)} passed"
        return "\n".join(failures)

    # --- memory ---------------------------------------------------------------------------

    async def _compact_if_due(self) -> None:
        """Fold the oldest finished steps into the rolling summary once the list is long;
        each step's own note stays in the journal."""
        if len(self._notes) <= COMPACT_AT:
            return
        entries = self._notes[:-KEEP_RECENT]
        await self._run.checkpoint("model")  # a pause or an exhausted budget holds here
        try:
            result: CompactResult = await self._execute(
                ModelActivities.compact,
                CompactRequest(
                    run_id=self._inp.run_id,
                    model=self._spec.actor_model,
                    goal=self._inp.goal,
                    summary=self._summary,
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
            self._count(result.usage)
            summary = result.summary.strip()
        if not summary:
            summary = "\n".join([self._summary, *entries]).strip()
            if len(summary) > SUMMARY_CHARS:
                summary = "…" + summary[-(SUMMARY_CHARS - 1) :]
        self._summary = summary
        self._notes = self._notes[-KEEP_RECENT:]

    async def _recall(self, query: str) -> list[str]:
        recall: Recall = await workflow.execute_activity_method(
            MemoryActivities.recall,
            RecallRequest(run_id=self._inp.run_id, query=query, k=RECALL_NOTES),
            start_to_close_timeout=MEMORY_TIMEOUT,
            retry_policy=retry_policy(None),
            summary="recall notes",
        )
        return [f"[{n.kind}, {n.step}] {n.text}" for n in recall.notes]

    async def _keep(self, step: str, kind: str, text: str) -> None:
        await workflow.execute_activity_method(
            MemoryActivities.write,
            NoteWrite(run_id=self._inp.run_id, note=Note(kind=kind, step=step, text=text[:2000])),
            start_to_close_timeout=MEMORY_TIMEOUT,
            retry_policy=retry_policy(None),
            summary=f"note: {step}",
        )

    # --- plumbing -----------------------------------------------------------------------------

    def _count(self, usage: ModelUsage | None) -> None:
        if usage is not None:
            self._run.add_usage(usage.model, usage.input_tokens, usage.output_tokens)

    async def _activity(
        self,
        method: Any,
        arg: Any,
        *,
        summary: str,
        limit: timedelta = MODEL_TIMEOUT,
        kind: Literal["model", "tool"] = "model",
    ) -> Any:
        """Run a model or verify activity; a failure that retries cannot fix fails the run."""
        await self._run.checkpoint(kind)
        try:
            return await self._execute(method, arg, summary=summary, limit=limit)
        except ActivityError as exc:
            message, _ = failure_of(exc)
            raise StepFailed(f"{summary} failed: {message}") from None

    async def _execute(
        self, method: Any, arg: Any, *, summary: str, limit: timedelta = MODEL_TIMEOUT
    ) -> Any:
        """Run an activity with the loop's timeouts and retries (after `checkpoint`)."""
        return await workflow.execute_activity_method(
            method,
            arg,
            start_to_close_timeout=limit,
            # Checks may run tools, which heartbeat; model calls do not.
            heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT if limit is VERIFY_TIMEOUT else None,
            retry_policy=retry_policy(None),
            summary=summary,
        )


def _duplicate_ids(plan: AgentPlan | None) -> str | None:
    if plan is None:
        return None
    ids = [s.id for s in plan.steps]
    return None if len(set(ids)) == len(ids) else "step ids must be unique"


def _assistant_message(result: ActResult) -> dict[str, Any]:
    """The model's turn as the step's later turns resend it. Long tool arguments (a file's
    content) are cut to a preview there: they ran already, and resending them on every
    turn would grow the step's history with the square of its turns."""
    message: dict[str, Any] = {"role": "assistant", "content": result.content}
    if result.tool_calls:
        message["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": _echoed(c.arguments)},
            }
            for c in result.tool_calls
        ]
    return message


def _echoed(arguments: str) -> str:
    if len(arguments) <= ECHOED_ARGUMENT_CHARS:
        return arguments
    cut = {"cut": f"{len(arguments)} characters", "start": arguments[:ECHOED_ARGUMENT_CHARS]}
    return json.dumps(cut)


def _names_a_secret(value: Any) -> bool:
    if isinstance(value, dict):
        return set(value) == {"secret"} or any(_names_a_secret(v) for v in value.values())
    if isinstance(value, list):
        return any(_names_a_secret(v) for v in value)
    return False


def _finish_summary(call: ToolCallRequest) -> str:
    try:
        args = json.loads(call.arguments[:MAX_ARGUMENT_CHARS] or "{}")
    except (ValueError, RecursionError):
        return call.arguments[:1000]
    summary = args.get("summary") if isinstance(args, dict) else None
    return str(summary or call.arguments)[:1000]
