"""A run's questions to the grants workflow (workflows/grants.py): before it asks a person
whether a call may run, may it run under a standing approval? Asked by a signal, answered
by a signal; no answer in time, or no grants workflow, is "no": the run asks a person."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from workflows.audit import AuditLog
from workflows.changes import changed

with workflow.unsafe.imports_passed_through():
    from longrun import wire
    from longrun.contracts import GrantOutcome, GrantRequest, GrantUse, RunInput

ANSWER_WAIT_S = 30.0


class Standing:
    """The grants workflow's answers to this run."""

    def __init__(self, inp: RunInput, audit: AuditLog) -> None:
        self._inp = inp
        self._audit = audit
        self._answers: dict[str, GrantOutcome] = {}

    def answer(self, outcome: GrantOutcome) -> None:
        """The grants workflow answered a question of this run."""
        self._answers[outcome.request_id] = outcome

    async def covering(self, step_id: str, tool: str, args: dict[str, Any]) -> str | None:
        """The grant under which this call runs without asking (its use counted, and in
        the audit), or None."""
        if not changed("standing-grants"):
            return None
        info = workflow.info()
        request_id = f"use-{workflow.uuid4().hex}"
        use = GrantUse(
            run_id=info.workflow_id,
            tool=tool,
            args=args,
            labels=self._inp.labels,
            tenant=self._inp.tenant,
            owner=self._inp.owner,
        )
        ask = GrantRequest(request_id=request_id, action="use", use=use, reply_to=info.workflow_id)
        grants = workflow.get_external_workflow_handle(wire.grants_workflow_id(info.task_queue))
        try:
            await grants.signal(wire.GRANT, ask)
        except Exception:  # no grants workflow (none was ever made): nothing is granted
            return None
        try:
            await workflow.wait_condition(
                lambda: request_id in self._answers, timeout=ANSWER_WAIT_S
            )
        except TimeoutError:
            return None
        answer = self._answers.pop(request_id)
        if not answer.taken or answer.grant_id is None:
            return None
        self._audit.record(
            answer.grant_id, "approve", f"step {step_id}: {tool} under standing grant"
        )
        return answer.grant_id
