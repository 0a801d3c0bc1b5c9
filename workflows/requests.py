"""Requests people send a run as signals (decisions, pauses, resumes, budget changes), each
with an id: the run takes or refuses each, and keeps the outcome for the API to read back
(the `outcome` query) and tell its caller. Signals, not updates: a signal is an event in
history, so its place among the run's other work replays exactly, also when it reached a
workflow task that a dead worker had left to time out."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import ApprovalDecision, RequestOutcome

OUTCOMES_KEPT = 100  # the latest requests' outcomes; a hand-over carries them


class Requests:
    """Outcomes of the latest requests, by request id."""

    def __init__(
        self,
        decide: Callable[[ApprovalDecision], object],
        refusal: Callable[[ApprovalDecision], tuple[str, str] | None],
    ) -> None:
        self._decide = decide
        self._refusal = refusal
        self.outcomes: dict[str, RequestOutcome] = {}
        # Decisions on an approval the run has not asked for yet, by approval id.
        self.deferred: dict[str, ApprovalDecision] = {}

    def restore(self, outcomes: list[RequestOutcome], deferred: list[ApprovalDecision]) -> None:
        """Take over an earlier segment's outcomes and deferred decisions."""
        self.outcomes = {o.request_id: o for o in outcomes}
        self.deferred = {d.approval_id: d for d in deferred}

    def defer(self, decision: ApprovalDecision) -> None:
        """Hold a decision on an approval the run has not asked for yet, and take it the
        moment the run does (`release`). The API only sends decisions on approvals it has
        seen, so this happens when a worker died after showing the request but before
        recording it: the run asks again on another worker, and the decision must be
        taken after the request then, as it will be in replay, whichever order a workflow
        task delivers them in."""
        self.deferred.setdefault(decision.approval_id, decision)
        while len(self.deferred) > OUTCOMES_KEPT:
            del self.deferred[next(iter(self.deferred))]

    def release(self, approval_id: str) -> None:
        """The run asked for `approval_id`: take a decision that came before."""
        decision = self.deferred.pop(approval_id, None)
        if decision is not None and decision.request_id is not None:
            refusal = self._refusal(decision)  # a digest of another call, say
            self.handle(decision.request_id, refusal, partial(self._decide, decision))

    def listed_deferred(self) -> list[ApprovalDecision]:
        """The deferred decisions a hand-over carries."""
        return list(self.deferred.values())

    def handle(
        self, request_id: str, refusal: tuple[str, str] | None, take: Callable[[], object]
    ) -> None:
        """Take the request (`take`) unless `refusal` says why not, and keep which; a
        request seen before is not taken twice."""
        if request_id in self.outcomes:
            return
        if refusal is None:
            take()
            outcome = RequestOutcome(request_id=request_id, taken=True)
        else:
            kind, message = refusal
            outcome = RequestOutcome(request_id=request_id, taken=False, kind=kind, message=message)
        self.outcomes[request_id] = outcome
        while len(self.outcomes) > OUTCOMES_KEPT:
            del self.outcomes[next(iter(self.outcomes))]

    def outcome(self, request_id: str) -> RequestOutcome | None:
        """What became of a request, if the run has seen it."""
        return self.outcomes.get(request_id)

    def listed(self) -> list[RequestOutcome]:
        """What a hand-over carries."""
        return list(self.outcomes.values())
