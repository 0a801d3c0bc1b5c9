"""The hand-over: what one history segment of a run carries to the next when it continues
as new, and how the next one takes it over."""

from __future__ import annotations

import asyncio
from typing import NoReturn

from temporalio import workflow

from workflows.parts import RunParts
from workflows.steps import AGENT_STEPS_KEPT, OPEN, listed

with workflow.unsafe.imports_passed_through():
    from longrun import plans
    from longrun.contracts import AgentCarry, Plan, RunCarry


class HandOver:
    """Continue-as-new at a quiet moment, with each part's slice of the carry."""

    def __init__(self, parts: RunParts) -> None:
        self._parts = parts
        self.segment = 1
        self.underway = False  # steps stopped by a hand-over keep waiting for their approval

    def restore(self, carry: RunCarry) -> None:
        """Take over from the previous history segment."""
        p = self._parts
        self.segment = carry.segment
        p.steps.restore(carry.steps, carry.steps_dropped)
        p.approvals.restore(carry.approvals)  # after the steps: it reads who waits
        p.ledger.restore(carry.usage, carry.budget, carry.started, carry.pause_request)
        p.audit.entries = carry.audit
        p.undo.restore(carry.completed_calls, carry.compensate_on_cancel)

    def due(self, settled: int) -> bool:
        """Whether to continue as new, after `settled` steps ended in this segment."""
        return (
            settled >= self._parts.inp.config.continue_as_new_every
            or workflow.info().is_continue_as_new_suggested()
        )

    async def hand_over(
        self, running: dict[str, asyncio.Task[None]], agent: AgentCarry | None = None
    ) -> NoReturn:
        """Continue as new: stop the steps that only wait for a person (their approvals
        travel along and are waited on again), let handlers finish, pass the state on."""
        self.underway = True
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        # A signal that arrives after this point makes the server refuse the hand-over;
        # the task runs again with it, so no signal is lost.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._parts.audit.record("longrun", "continued as new", f"segment {self.segment + 1}")
        carry = self.carry(agent)
        workflow.continue_as_new(self._parts.inp.model_copy(update={"carry": carry}))

    def carry(self, agent: AgentCarry | None = None) -> RunCarry:
        """What the next segment starts from."""
        p = self._parts
        steps = list(p.steps.by_id.values())
        dropped = p.steps.dropped
        if p.inp.plan is not None:
            # Outputs later steps refer to, and the result's, travel whole; the rest are
            # in history already and travel as previews.
            needed = self._needed_outputs(p.inp.plan)
            steps = [s if s.id in needed else listed(s) for s in steps]
        if agent is not None:
            # An agent's tool calls are referenced by nobody later: the recent ones travel,
            # big outputs previewed, the rest are counted.
            dropped += max(0, len(steps) - AGENT_STEPS_KEPT)
            steps = [listed(s) for s in steps[-AGENT_STEPS_KEPT:]]
        return RunCarry(
            segment=self.segment + 1,
            started=p.ledger.started,
            steps=steps,
            steps_dropped=dropped,
            # A decided approval's arguments are in history already; its record travels
            # on so that approval ids stay unique.
            approvals=p.approvals.listed(),
            usage=p.ledger.usage,
            budget=p.ledger.budget,
            audit=p.audit.entries,
            completed_calls=p.undo.calls,
            pause_request=p.ledger.pause_request,
            compensate_on_cancel=p.undo.compensate_on_cancel,
            agent=agent,
        )

    def _needed_outputs(self, plan: Plan) -> set[str]:
        """Steps whose outputs are still needed: referenced by a step yet to end, or part
        of the result (no step depends on them)."""
        steps = self._parts.steps.by_id
        depended_on = {d for s in plan.steps for d in (s.depends_on or [])}
        needed = {s.id for s in plan.steps if s.id not in depended_on}
        for step in plan.steps:
            if steps[step.id].status in OPEN:
                needed |= plans.referenced_steps(step)
        return needed
