"""A child run's reports to its parent (signal `child`): whenever its status, pause or
pending approvals change, and once as it ends, with what it used and what its parent would
undo. Reports are numbered; the parent keeps the latest, so a report that comes twice or
late changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import FailureError

with workflow.unsafe.imports_passed_through():
    from longrun import wire
    from longrun.contracts import ChildReport, CompletedCall


class Reporting:
    """What a child run has told its parent; a run without a parent reports nothing."""

    def __init__(self, parent_run_id: str | None, state: Callable[[], ChildReport]) -> None:
        self._parent = parent_run_id
        self._state = state  # the report as things stand (seq and final left to fill in)
        self.sent = 0
        self._shown: tuple[object, ...] | None = None
        self._sends: list[asyncio.Task[None]] = []

    def notice(self) -> None:
        """Report if what the parent shows of this run changed."""
        if self._parent is None:
            return
        report = self._state()
        shown = (
            report.status,
            report.pause_reason,
            tuple(a.approval_id for a in report.pending_approvals),
        )
        if shown != self._shown:
            self._shown = shown
            self._send(report)

    async def final(self, undo: list[CompletedCall]) -> None:
        """Report the end, with `undo` (the calls left for the parent to undo), and wait
        until the parent has it: it must before the child's end reaches the parent."""
        if self._parent is None:
            return
        self._send(self._state().model_copy(update={"final": True, "undo": undo}))
        await self.settle()

    async def settle(self) -> None:
        """Wait until every report sent is delivered (or could not be)."""
        while self._sends:
            sends, self._sends = self._sends, []
            await asyncio.gather(*sends)

    def _send(self, report: ChildReport) -> None:
        assert self._parent is not None
        self.sent += 1
        report = report.model_copy(update={"seq": self.sent})
        parent = workflow.get_external_workflow_handle(self._parent)

        async def send() -> None:
            try:
                await parent.signal(wire.CHILD, report)
            except FailureError as exc:  # the parent has ended: nobody to tell
                workflow.logger.info("report to parent run %s not sent: %s", self._parent, exc)

        self._sends.append(asyncio.create_task(send()))
