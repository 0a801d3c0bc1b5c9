"""The grants workflow: the standing approvals of one task queue's runs, kept by Temporal
like everything else. Approvers add and revoke grants through the API (a signal with a
request id whose outcome the API reads back); a run about to ask a person whether a call
may run asks here first (a signal), and is answered by a signal naming the grant that
covers the call, its use counted, or none. One request at a time, so a grant of N uses is
used N times, however many runs ask at once."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import VersioningBehavior

with workflow.unsafe.imports_passed_through():
    from longrun import wire
    from longrun.contracts import Grant, GrantList, GrantOutcome, GrantRequest, GrantsInput
    from longrun.standing import covers, ended

OUTCOMES_KEPT = 200  # the latest requests' outcomes (the API reads its own back)
ENDED_KEPT = 200  # grants ended lately, still listed
HANDOVER_EVENTS = 5_000  # a fresh history after about this many events


@workflow.defn(name=wire.GRANTS_WORKFLOW, versioning_behavior=VersioningBehavior.AUTO_UPGRADE)
class GrantsWorkflow:
    """Standing approvals: add, revoke, use, list."""

    @workflow.init
    def __init__(self, inp: GrantsInput) -> None:
        # Set up before any signal is handled: the request that starts the workflow is one.
        self._grants: dict[str, Grant] = {g.grant_id: g for g in inp.grants}
        self._outcomes: dict[str, GrantOutcome] = {o.request_id: o for o in inp.outcomes}
        self._answers: list[tuple[str, GrantOutcome]] = []  # (run id, answer) to send

    @workflow.run
    async def run(self, inp: GrantsInput) -> None:
        """Keep the grants, answer runs, and hand over to a fresh history now and then."""
        while True:
            await workflow.wait_condition(lambda: bool(self._answers) or self._full())
            answers, self._answers = self._answers, []
            await asyncio.gather(*(self._send(run_id, answer) for run_id, answer in answers))
            if self._full() and not self._answers:
                await workflow.wait_condition(workflow.all_handlers_finished)
                workflow.continue_as_new(self._carried())

    async def _send(self, run_id: str, answer: GrantOutcome) -> None:
        try:
            await workflow.get_external_workflow_handle(run_id).signal(wire.GRANT_ANSWER, answer)
        except Exception:  # a run that ended asks nothing any more
            workflow.logger.info("run %s ended before its grant answer", run_id)

    def _full(self) -> bool:
        return workflow.info().get_current_history_length() > HANDOVER_EVENTS

    def _carried(self) -> GrantsInput:
        now = workflow.now()
        live = [g for g in self._grants.values() if ended(g, now) is None]
        gone = [g for g in self._grants.values() if ended(g, now) is not None][-ENDED_KEPT:]
        return GrantsInput(grants=[*gone, *live], outcomes=list(self._outcomes.values()))

    @workflow.signal(name=wire.GRANT)
    def request(self, req: GrantRequest) -> None:
        """Add, revoke or use a grant; a request seen before is not taken twice."""
        if req.request_id in self._outcomes:
            return
        if req.action == "add" and req.grant is not None:
            outcome = self._add(req)
        elif req.action == "revoke":
            outcome = self._revoke(req)
        elif req.action == "use" and req.use is not None:
            outcome = self._use(req)
        else:
            outcome = GrantOutcome(request_id=req.request_id, taken=False, message="malformed")
        self._outcomes[req.request_id] = outcome
        while len(self._outcomes) > OUTCOMES_KEPT:
            del self._outcomes[next(iter(self._outcomes))]
        if req.action == "use" and req.reply_to is not None:
            self._answers.append((req.reply_to, outcome))

    def _add(self, req: GrantRequest) -> GrantOutcome:
        assert req.grant is not None
        grant = req.grant.model_copy(
            update={
                "granted_at": workflow.now(),
                "expires_at": (
                    workflow.now() + timedelta(hours=req.grant.hours) if req.grant.hours else None
                ),
                "uses_left": req.grant.uses,
            }
        )
        self._grants[grant.grant_id] = grant
        return GrantOutcome(request_id=req.request_id, taken=True, grant_id=grant.grant_id)

    def _revoke(self, req: GrantRequest) -> GrantOutcome:
        grant = self._grants.get(req.grant_id or "")
        if grant is None or grant.tenant != req.tenant:
            return GrantOutcome(
                request_id=req.request_id, taken=False, message=f"no grant '{req.grant_id}'"
            )
        why = ended(grant, workflow.now())
        if why is not None:
            return GrantOutcome(
                request_id=req.request_id,
                taken=False,
                grant_id=grant.grant_id,
                message=f"grant '{grant.grant_id}' has already ended: {why}",
            )
        grant.revoked_at = workflow.now()
        grant.revoked_by = req.actor
        return GrantOutcome(request_id=req.request_id, taken=True, grant_id=grant.grant_id)

    def _use(self, req: GrantRequest) -> GrantOutcome:
        assert req.use is not None
        now = workflow.now()
        for grant in self._grants.values():
            if covers(grant, req.use, now):
                grant.used += 1
                if grant.uses_left is not None:
                    grant.uses_left -= 1
                return GrantOutcome(request_id=req.request_id, taken=True, grant_id=grant.grant_id)
        return GrantOutcome(request_id=req.request_id, taken=False, message="no grant covers it")

    @workflow.query(name=wire.GRANTS)
    def grants(self) -> GrantList:
        """Every grant kept: live ones and those ended lately."""
        return GrantList(grants=list(self._grants.values()))

    @workflow.query(name=wire.GRANT_OUTCOME)
    def outcome(self, request_id: str) -> GrantOutcome | None:
        """What became of a request, if the workflow has seen it."""
        return self._outcomes.get(request_id)
