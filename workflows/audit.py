"""The audit trail: every decision about a run, who took it, when and why, oldest first."""

from __future__ import annotations

from temporalio import workflow

from workflows.common import Clock, cut
from workflows.events import EventLog

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import AuditEntry

AUDIT_DETAIL_CHARS = 1000  # of one entry's detail, so the trail stays small to carry


class AuditLog:
    """Append-only decisions; its entries travel whole across continue-as-new."""

    def __init__(self, now: Clock, entries: list[AuditEntry], events: EventLog) -> None:
        self._now = now
        self._events = events
        self.entries = entries
        self.archived: list[str] = []  # artifacts holding earlier entries, oldest first

    def record(
        self, actor: str, action: str, detail: str | None = None, *, event: bool = True
    ) -> None:
        """Add a decision to the trail, and to the event log unless the caller records a
        more telling event for it (`event=False`)."""
        if detail is not None:
            detail = cut(detail, AUDIT_DETAIL_CHARS)
        self.entries.append(AuditEntry(at=self._now(), actor=actor, action=action, detail=detail))
        if event:
            self._events.emit("audit", actor=actor, action=action, detail=detail)
