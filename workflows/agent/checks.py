"""The agent's checks: each step's verification, and the acceptance criteria that must all
pass before a run may call itself complete."""

from __future__ import annotations

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
    from longrun.contracts import AgentSpec, CheckRequest, Note, PlanItem, ToolCheck, Verdict


class Checker:
    """Runs `verify.step` and `verify.acceptance` for the agent loop."""

    def __init__(self, parts: RunParts, spec: AgentSpec, state: AgentState) -> None:
        self._parts = parts
        self._spec = spec
        self._state = state

    async def verify_step(self, item: PlanItem) -> Verdict:
        """Whether the step the model claims done shows its expected evidence."""
        self._state.enter("verifying")
        verdict = await self._check(
            VerifyActivities.step,
            item.id,
            summary=f"verify: {item.id}",
            statement=f"This step is done: {item.intent}. "
            f"Expected evidence: {item.expected_evidence}",
            observations=f"The agent's summary: {item.summary}\nTool results:\n"
            + prompts.bullet(self._state.observations),
            journal=Note(kind="summary", step=item.id, text=f"{item.intent}: {item.summary}")
            if self._state.context
            else None,
        )
        self._state.last_check = f"{item.id}: {'passed' if verdict.passed else 'failed'}"
        return verdict

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
