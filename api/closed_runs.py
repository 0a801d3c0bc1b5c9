"""Ended runs' status, kept as the API last answered it: a run closed in Temporal never
changes, so reading it again needs only the `describe` that says it is still the same
closed run, not its stored record nor a query."""

from __future__ import annotations

from collections import OrderedDict

from fastapi import Request

ENDED_CACHE_BYTES = 32 * 1024 * 1024
# Whom a kept run belongs to (owner, tenant), so that reading it again is checked as well.
Owners = tuple[str, str | None]


class EndedRuns:
    """Response bodies of closed runs by run id and Temporal run id, least recently read
    dropped first once they hold more than `max_bytes`."""

    def __init__(self, max_bytes: int = ENDED_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._bodies: OrderedDict[str, tuple[str, bytes, Owners]] = OrderedDict()
        self._bytes = 0

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._bodies

    def body(self, run_id: str, execution: str) -> tuple[bytes, Owners] | None:
        """The body kept for this run, and whom the run belongs to, if it is of that
        execution (a reset starts another)."""
        kept = self._bodies.get(run_id)
        if kept is None or kept[0] != execution:
            return None
        self._bodies.move_to_end(run_id)
        return kept[1], kept[2]

    def keep(self, run_id: str, execution: str, body: bytes, owners: Owners) -> None:
        """Keep the body of a run Temporal has closed."""
        if len(body) > self.max_bytes:
            return
        self.forget(run_id)
        self._bodies[run_id] = (execution, body, owners)
        self._bytes += len(body)
        while self._bytes > self.max_bytes:
            _, (_, dropped, _) = self._bodies.popitem(last=False)
            self._bytes -= len(dropped)

    def forget(self, run_id: str) -> None:
        """Drop what is kept for the run, if anything."""
        kept = self._bodies.pop(run_id, None)
        if kept is not None:
            self._bytes -= len(kept[1])


async def ended_runs(request: Request) -> EndedRuns:
    """This app's ended runs."""
    found: EndedRuns = request.app.state.ended
    return found
