"""Requests people send a run as signals (decisions, pauses, resumes, budget changes), each
with an id: the run takes or refuses each, and keeps the outcome for the API to read back
(the `outcome` query) and tell its caller. Signals, not updates: a signal is an event in
history, so its place among the run's other work replays exactly, also when it reached a
workflow task that a dead worker had left to time out."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import RequestOutcome

OUTCOMES_KEPT = 100  # the latest requests' outcomes; a hand-over carries them


class Requests:
    """Outcomes of the latest requests, by request id."""

    def __init__(self) -> None:
        self.outcomes: dict[str, RequestOutcome] = {}

    def restore(self, outcomes: list[RequestOutcome]) -> None:
        """Take over an earlier segment's outcomes."""
        self.outcomes = {o.request_id: o for o in outcomes}

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
