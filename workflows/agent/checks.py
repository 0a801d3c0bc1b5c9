"""The agent's checks: each step's verification, and the acceptance criteria that must all
pass before a run may call itself complete. Runs started with `done-when-done` also check
their criteria as soon as a tool call changed something (when every criterion is a tool's,
so checking costs no model call), and do not complete without a change when the goal asks
for one (it says to write, post, send...), no criterion of a tool's proves it, and a tool
of the run could make it. Runs started with `steps-need-evidence` fail a step that asks
for a tool's work (to write, read, fetch, run...) in which no tool ran, without asking the
judge: a small model's judge passes a claim with nothing to show for it."""

from __future__ import annotations

import re
from typing import Any

from temporalio import workflow

from workflows.agent.briefs import NOTES_KEPT
from workflows.agent.state import AgentState
from workflows.common import VERIFY_TIMEOUT
from workflows.ledger import CallKind
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: a method reference, pure prompt text and pydantic models.
    from activities.verify import VerifyActivities
    from longrun import prompts
    from longrun.catalogue import McpToolSpec
    from longrun.contracts import AgentSpec, CheckRequest, Note, PlanItem, ToolCheck, Verdict

# A goal that says one of these asks for a change (a file written, a request that acts).
ASKS_FOR_CHANGE = re.compile(
    r"\b(write|save|create|post|put|patch|delete|remove|send|place|update|append|rename|"
    r"move|deploy|install|upload|commit)\b",
    re.IGNORECASE,
)
# A step that says one of these asks for a tool's work: with no tool run, it is not done.
ASKS_FOR_A_TOOL = re.compile(
    rf"{ASKS_FOR_CHANGE.pattern}|\b(read|fetch|get|download|request|run|execute|call|query)\b",
    re.IGNORECASE,
)
TO_THE_CHECKS = (
    "not judged: the last step is proved by the run's acceptance criteria, every one of "
    "them a tool's check"
)
NO_TOOL_RAN = (
    "no tool ran in this step, and it asks for what a tool does: nothing shows it done. "
    "Call the tool that does it"
)
NO_EFFECT = (
    "effect: no tool call of this run has changed anything yet (a write, a request that "
    "acts), and nothing else shows the goal met: do what it asks with the tools"
)


class Checker:
    """Runs `verify.step` and `verify.acceptance` for the agent loop."""

    def __init__(self, parts: RunParts, spec: AgentSpec, state: AgentState) -> None:
        self._parts = parts
        self._spec = spec
        self._state = state
        self.done_when_done = False  # the loop sets it for runs started with the change
        self.steps_need_evidence = False  # likewise
        self.last_step_to_the_checks = False  # likewise
        self._tools = bool(spec.tools)
        tool_checks = [isinstance(c.check, ToolCheck) for c in spec.acceptance]
        # Every criterion a tool's: checked after each change, for no model call.
        self.checks_cheaply = bool(tool_checks) and all(tool_checks)
        # A goal asking for a change, no criterion of a tool's, a tool that can make it: a
        # run that changed nothing has nothing to show for it.
        tools = [parts.tools[name] for name in spec.tools if name in parts.tools]
        self._needs_effect = (
            not any(tool_checks)
            and any(map(_can_change, tools))
            and ASKS_FOR_CHANGE.search(parts.inp.goal) is not None
        )

    async def verify_step(self, item: PlanItem, last: bool) -> Verdict:
        """Whether the step the model claims done shows its expected evidence (`last`:
        the plan's last step, which the acceptance criteria may prove instead)."""
        self._state.enter("verifying")
        if self._shows_nothing(item):
            self._state.last_check = f"{item.id}: failed"
            return Verdict(passed=False, evidence=NO_TOOL_RAN)
        if last and self.last_step_to_the_checks and self.checks_cheaply:
            self._state.last_check = f"{item.id}: to the acceptance criteria"
            return Verdict(passed=True, evidence=TO_THE_CHECKS)
        verdict = await self._check(
            VerifyActivities.step,
            item.id,
            summary=f"verify: {item.id}",
            statement=f"This step is done: {item.intent}. "
            f"Expected evidence: {item.expected_evidence}",
            observations=f"The agent's summary: {item.summary}\n{prompts.TOOL_RESULTS}\n"
            + prompts.bullet(self._state.observations),
            outputs=list(self._state.observations),
            journal=Note(kind="summary", step=item.id, text=f"{item.intent}: {item.summary}"),
        )
        self._state.last_check = f"{item.id}: {'passed' if verdict.passed else 'failed'}"
        return verdict

    def _shows_nothing(self, item: PlanItem) -> bool:
        """Whether the step asks for a tool's work and no tool ran in it."""
        if not (self.steps_need_evidence and self._tools) or self._state.observations:
            return False
        return ASKS_FOR_A_TOOL.search(item.intent) is not None

    async def acceptance(self) -> str:
        """Check every criterion; the failures as text, empty when all pass."""
        state = self._state
        state.enter("completing")
        summary = state.current.summary if state.current else None
        observations = (
            f"The agent's claim: {summary}\nNotes from finished steps:\n"
            + prompts.bullet(state.notes[-NOTES_KEPT:])
        )
        if state.summary:
            observations = f"Progress summary: {state.summary}\n{observations}"
        failures = []
        for criterion, result in zip(self._spec.acceptance, state.acceptance, strict=True):
            check = criterion.check
            tool_check = check if isinstance(check, ToolCheck) else None
            verdict = await self._check(
                VerifyActivities.acceptance,
                criterion.id,
                summary=f"acceptance: {criterion.id}",
                kind="tool" if tool_check else "model",
                tool_check=tool_check,
                statement=None if isinstance(check, ToolCheck) else check.judge,
                observations=observations,
            )
            result.status = "passed" if verdict.passed else "failed"
            result.evidence = verdict.evidence[:2000]
            if not verdict.passed:
                failures.append(f"{criterion.id}: {verdict.evidence}")
        passed = len(state.acceptance) - len(failures)
        # A person's "no" to the change the goal needed is an answer: the claim is judged.
        if self.done_when_done and self._needs_effect and not (state.effects or state.rejected):
            failures.append(NO_EFFECT)
        state.last_check = f"acceptance {passed}/{len(state.acceptance)} passed"
        return "\n".join(failures)

    async def _check(
        self,
        method: Any,
        check_id: str,
        *,
        summary: str,
        kind: CallKind = "model",
        tool_check: ToolCheck | None = None,
        statement: str | None = None,
        observations: str = "",
        outputs: list[str] | None = None,
        journal: Note | None = None,
    ) -> Verdict:
        inp = self._parts.inp
        verdict: Verdict = await self._parts.calls.checked(
            method,
            CheckRequest(
                run_id=inp.run_id,
                check_id=check_id,
                goal=inp.goal,
                tool_check=tool_check,
                statement=statement,
                observations=observations,
                outputs=outputs or [],
                judge_model=self._spec.judge_model,
                journal=journal,
                grant=self._parts.calls.grant,
            ),
            summary=summary,
            limit=VERIFY_TIMEOUT,
            kind=kind,
        )
        self._parts.ledger.count(verdict.usage)
        return verdict


def _can_change(tool: Any) -> bool:
    """Whether calls of `tool` may change something (its side-effect class is not always
    read-only; it may depend on the arguments, as an HTTP request's method)."""
    fixed = tool.tool.side_effect if isinstance(tool, McpToolSpec) else tool.side_effect
    return bool(fixed != "read_only")
