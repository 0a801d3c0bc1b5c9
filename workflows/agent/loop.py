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

from typing import Any

from temporalio import workflow

from workflows.agent import briefs
from workflows.agent.acting import Actor
from workflows.agent.checks import Checker
from workflows.agent.memory import Memory
from workflows.agent.state import AgentState
from workflows.agent.watchdog import ProgressWatch, watching
from workflows.changes import baseline_retired, changed
from workflows.common import StepFailed
from workflows.handover import HandOver
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: a method reference, pure prompt text and pydantic models.
    from activities.model import ModelActivities
    from longrun import prompts
    from longrun.contracts import AgentSpec, Phase, PlanAttempt, PlanItem, PlanRequest

DIRECT_STEP = "goal"  # the one step of a run that works on its goal without a plan
FIX_INTENT = "Make the failing acceptance criteria pass"


class AgentLoop:
    """Drives a model through a goal until its acceptance criteria verifiably pass."""

    def __init__(self, parts: RunParts, handover: HandOver, spec: AgentSpec) -> None:
        self._parts = parts
        self._handover = handover
        self._spec = spec
        self.state = AgentState(spec, parts.refresh, self._entering)
        self._watch: ProgressWatch | None = None
        inp = parts.inp
        # An earlier segment's state, or (a retry or fork) where the run it starts again
        # stood, with the steps before the one it goes on from done.
        carried = inp.carry.agent if inp.carry is not None else None
        if inp.carry is None and inp.reuse is not None:
            carried = inp.reuse.agent
        self._resumed = carried is not None
        if carried is not None:
            self.state.restore(carried)
        self._turns_at_start = self.state.turns
        self._verified_here = 0  # plan steps verified in this history segment
        self._restates = False  # run() sets it for runs started with the change
        self._prose = False  # likewise
        self._checker = Checker(parts, spec, self.state)
        self._memory = Memory(parts, spec, self.state)
        self._actor = Actor(parts, spec, self.state, self._checker, self._memory)

    async def run(self) -> dict[str, Any]:
        """Plan, then work through the plan until the goal is verifiably met."""
        s = self.state
        baseline_retired()
        self._checker.done_when_done = changed("done-when-done")
        self._checker.steps_need_evidence = changed("steps-need-evidence")
        self._actor.keeps_evidence = changed("step-evidence-kept")
        self._checker.last_step_to_the_checks = changed("last-step-to-the-checks")
        self._restates = changed("fix-steps-restate-the-goal")
        self._prose = self._actor.criteria_in_prose = changed("criteria-in-prose")
        if watching():
            ledger = self._parts.ledger
            self._watch = self._actor.watch = ProgressWatch(
                self._spec.watchdog,
                s,
                workflow.now,
                lambda: ledger.budget.max_duration_s,
                coach=changed("watchdog-coaches"),
                coach_invalid=changed("invalid-answers-coached"),
            )
        if not self._resumed:
            s.plan = await self._make_plan(context=None)
        while True:
            # Between steps is the quiet moment to hand over: no call or approval is open.
            # (Only after progress here, a verified step or at least a turn, so a segment
            # always moves the run forward.)
            progressed = self._verified_here or s.turns > self._turns_at_start
            if progressed and self._handover.due(self._verified_here):
                if self._watch is not None:
                    self._watch.leave(s.phase)  # its time so far travels along
                await self._handover.hand_over({}, agent=s.carry())
            if s.index == len(s.plan):
                # The plan is done, which claims the goal is met: prove it.
                failures = await self._checker.acceptance()
                if not failures:
                    return s.result()
                s.premature_completions += 1
                self._parts.events.emit("acceptance.failed", failures=failures)
                s.plan.append(
                    PlanItem(
                        id=f"fix-{s.premature_completions}",
                        intent=self._parts.inp.goal if self._restates else FIX_INTENT,
                        expected_evidence=failures[:2000],
                    )
                )
                continue
            item = s.current = s.plan[s.index]
            item.status = "running"
            if await self._actor.act(item, s.feedback):
                item.status = "completed"
                for later in s.plan[s.index + 1 :]:
                    later.status = "skipped"
                return s.result()
            last = s.index == len(s.plan) - 1
            verdict = await self._checker.verify_step(item, last)
            item.verification = verdict.evidence[:2000]
            self._parts.events.emit(
                "step.verified", item.id, passed=verdict.passed, evidence=verdict.evidence
            )
            if verdict.passed:
                item.status = "completed"
                s.notes.append(f"{item.intent[:200]}: {item.summary}")
                self._verified_here += 1
                if self._watch is not None:
                    self._watch.progressed()
                await self._memory.compact_if_due()
                s.index += 1
                s.feedback = None
                continue
            item.attempts += 1
            s.feedback = f"Verification of this step failed: {verdict.evidence[:2000]}"
            if item.attempts < self._spec.max_verify_attempts:
                continue
            if s.replans < self._spec.max_replans:
                s.replans += 1
                item.status = "failed"
                try:
                    fresh = await self._make_plan(self._replan_context(item, verdict.evidence))
                except StepFailed as exc:
                    baseline_retired()
                    # No new plan: a person decides, as when replans are used up.
                    why = f"{verdict.evidence[:500]}; replanning failed: {exc}"
                    s.feedback = await self._ask_for_help(item, why)
                    item.attempts = 0
                    item.status = "running"
                    continue
                for new in fresh:
                    new.id = f"r{s.replans}-{new.id}"[:64]
                s.plan[s.index + 1 :] = fresh
                s.index += 1
                s.feedback = None
                continue
            s.feedback = await self._ask_for_help(item, verdict.evidence)
            item.attempts = 0
            item.status = "running"

    def _planning_time(self) -> float | None:
        """What a plan call may take: the run's time left, and with the watchdog no more
        than planning's share of the time budget (so one answer cannot eat it)."""
        ledger = self._parts.ledger
        left = ledger.time_budget_left()
        budget = ledger.budget.max_duration_s
        if left is None or budget is None or self._watch is None:
            return left
        share = self._spec.watchdog.phase_share * budget
        return max(0.0, min(left, share - self._watch.phase_seconds(self.state.phase)))

    def _entering(self, phase: Phase) -> None:
        """The loop moves from its phase to `phase`."""
        if self._watch is not None:
            self._watch.leave(self.state.phase)
        self._parts.events.emit("phase", phase=phase)

    def _replan_context(self, item: PlanItem, why: str) -> str:
        s = self.state
        done = [f"(summary) {s.summary}"] if s.summary else []  # bounded however long the run
        done += s.notes
        return (
            f"Done so far:\n{prompts.bullet(done)}\n\n"
            f"Step '{item.id}' ({item.intent}) failed verification "
            f"{item.attempts} times: {why}\nPlan the remaining work differently."
        )

    async def _ask_for_help(self, item: PlanItem, why: str) -> str:
        item.status = "waiting_approval"
        approvals = self._parts.approvals
        ask = approvals.ask(
            item.id,
            f"Needs help: step '{item.id}' ({item.intent}) keeps failing verification after "
            f"{self.state.replans} replans: {why[:500]}. Approve with guidance in the comment "
            "to continue, or reject to fail the run.",
            kind="needs_help",
        )
        record = await approvals.decision(ask)
        if record.decision == "reject":
            reason = f": {record.comment}" if record.comment else ""
            raise StepFailed(
                f"step '{item.id}' kept failing verification and {record.decided_by} "
                f"declined to help{reason}"
            )
        item.guidance.append(f"{record.decided_by}: {record.comment or '(no comment)'}")
        if self._watch is not None:  # a person's answer starts the counting afresh
            self._watch.forgive()
        return f"Last failure: {why[:2000]}"

    async def _make_plan(self, context: str | None) -> list[PlanItem]:
        self.state.enter("planning" if context is None else "replanning")
        inp = self._parts.inp
        strategy = self._spec.strategy
        if context is None and strategy == "direct":
            return self._direct("the run's strategy is direct")
        error: str | None = None
        for _ in range(self._spec.max_plan_attempts):
            attempt: PlanAttempt = await self._parts.calls.checked(
                ModelActivities.plan,
                PlanRequest(
                    run_id=inp.run_id,
                    model=self._spec.planner_model,
                    goal=inp.goal,
                    criteria=self._criteria(),
                    tools=self._spec.tools,
                    context=context,
                    previous_error=error,
                    max_steps=max(1, self._spec.max_steps - self.state.turns),
                    time_left_s=self._planning_time(),
                    strategy=strategy,
                ),
                summary="plan" if context is None else f"replan {self.state.replans}",
            )
            self._parts.ledger.count(attempt.usage)
            if attempt.direct and context is None:
                return self._direct(attempt.error or "the model plans badly")
            if self._watch is not None:
                self._watch.note_time()
                guidance = await self._actor.held(None)
                if guidance is not None:  # the next attempt hears it
                    context = f"{context}\n\n" if context else ""
                    context += f"Guidance from a person: {guidance}"
            error = attempt.error or briefs.duplicate_ids(attempt.plan)
            if error is None and attempt.plan is not None:
                ids = ", ".join(s.id for s in attempt.plan.steps)
                replan = context is not None
                self._parts.audit.record(
                    "planner", "replan" if replan else "plan", ids, event=False
                )
                if attempt.repairs:
                    repairs = "; ".join(attempt.repairs)
                    self._parts.audit.record("longrun", "plan repaired", repairs, event=False)
                self._parts.events.emit("plan.made", replan=replan, steps=ids)
                return [
                    PlanItem(id=s.id, intent=s.intent, expected_evidence=s.expected_evidence)
                    for s in attempt.plan.steps
                ]
        why = f"the planner gave no valid plan in {self._spec.max_plan_attempts} attempts"
        if context is None and strategy == "auto":
            return self._direct(f"{why}; last problem: {error}")
        raise StepFailed(f"{why}; last problem: {error}")

    def _criteria(self) -> list[str]:
        return [briefs.describe_criterion(c, prose=self._prose) for c in self._spec.acceptance]

    def _direct(self, why: str) -> list[PlanItem]:
        """The goal as the plan's one step: what a run without a plan works on."""
        criteria = self._criteria()
        self._parts.audit.record("planner", "direct", why, event=False)
        self._parts.events.emit("plan.made", replan=False, steps=DIRECT_STEP, direct=why)
        return [
            PlanItem(
                id=DIRECT_STEP,
                intent=self._parts.inp.goal,
                expected_evidence="; ".join(criteria)[:2000]
                or "tool outputs showing that what the goal asks for was done",
            )
        ]
