"""Approval gates: requests to a person, their decisions (the first one wins), and the
waits of the steps that asked, which survive continue-as-new."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from types import MappingProxyType
from typing import Any

from temporalio import workflow

from workflows.audit import AuditLog
from workflows.common import TIMEOUT_ACTOR, Clock, cut
from workflows.events import EventLog
from workflows.steps import StepBook

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import (
        ApprovalDecision,
        ApprovalKind,
        ApprovalRecord,
        OnTimeout,
        PendingApproval,
        Role,
    )
    from longrun.digests import bound_refusal, call_digest

APPROVAL_SUMMARY_CHARS = 2000
# Approval ids by kind: apr-<step>, help-<step> for an agent asking for help, stall-<step>
# for a run the watchdog held.
APPROVAL_PREFIX: Mapping[str, str] = MappingProxyType({"needs_help": "help", "stalled": "stall"})
SHORT_CHARS = 200  # of an older decided request's summary and comment in status


class Approvals:
    """Every approval request of a run, decided or not."""

    def __init__(
        self,
        now: Clock,
        audit: AuditLog,
        steps: StepBook,
        on_change: Callable[[], None],
        events: EventLog,
        policy: str = "",
    ) -> None:
        """`policy`: the digest of the policy in force, which every request's digest binds."""
        self._now = now
        self._policy = policy
        self._audit = audit
        self._events = events
        self._steps = steps
        self._on_change = on_change
        self.records: dict[str, ApprovalRecord] = {}
        # Kept up to date as requests come and go, so status costs O(what waits).
        self.undecided: dict[str, ApprovalRecord] = {}
        # Requests a step was waiting on when the last segment handed over, by step.
        self._resumable: dict[str, ApprovalRecord] = {}
        # Decided requests an earlier segment stored away (see HandOver), by id.
        self.archived: dict[str, None] = {}
        # Called with a request's id once it is open (see Requests.defer).
        self.on_open: Callable[[str], None] | None = None

    def restore(self, records: list[ApprovalRecord], archived: list[str]) -> None:
        """Take over an earlier segment's requests (after the steps): a step still waiting
        waits on its request again."""
        self.records = {a.approval_id: a for a in records}
        self.archived = dict.fromkeys(archived)
        self.undecided = {k: a for k, a in self.records.items() if a.decision is None}
        for record in self.records.values():
            step = self._steps.by_id.get(record.step_id)
            if step is not None and step.status == "waiting_approval":
                self._resumable[record.step_id] = record

    def ask(
        self,
        step_id: str,
        summary: str,
        kind: ApprovalKind = "approval",
        arguments: Any = None,
        tool: str | None = None,
    ) -> ApprovalRecord:
        """Open a request for a step (or take over the one it had before continue-as-new,
        if it asked for the same call) and mark the step waiting. A request is bound to
        its call by a digest (`tool` and `arguments`, else the summary, and the policy)."""
        what = "" if tool is not None or arguments is not None else summary
        digest = call_digest(tool, arguments, self._policy, what)
        record = self._resumable.pop(step_id, None)
        if record is not None and record.digest not in (None, digest):
            self._supersede(record)  # the step asks for another call now
            record = None
        if record is None:
            record = self._open(step_id, summary, kind, arguments, digest, tool)
        if step_id in self._steps.by_id:
            self._steps.by_id[step_id].status = "waiting_approval"
        self._on_change()
        if record.decision is None and self.on_open is not None:
            self.on_open(record.approval_id)  # a decision that came before the request
        return record

    def _supersede(self, record: ApprovalRecord) -> None:
        """Close a request whose step now asks for another call: rejected, saying so."""
        if record.decision is None:
            self.decide(
                ApprovalDecision(
                    approval_id=record.approval_id,
                    decision="reject",
                    actor=TIMEOUT_ACTOR,
                    comment="superseded: the step asks for another call now",
                    digest=record.digest,
                )
            )

    def _open(
        self,
        step_id: str,
        summary: str,
        kind: ApprovalKind,
        arguments: Any,
        digest: str,
        tool: str | None,
    ) -> ApprovalRecord:
        approval_id = f"{APPROVAL_PREFIX.get(kind, 'apr')}-{step_id}"
        base, n = approval_id, 1
        while approval_id in self.records or approval_id in self.archived:  # asked again
            n += 1
            approval_id = f"{base}-{n}"
        record = ApprovalRecord(
            approval_id=approval_id,
            step_id=step_id,
            summary=cut(summary, APPROVAL_SUMMARY_CHARS),
            requested_at=self._now(),
            kind=kind,
            arguments=arguments,
            digest=digest,
            tool=tool,
        )
        self.records[approval_id] = record
        self.undecided[approval_id] = record
        self._events.emit(
            "approval.requested",
            step_id,
            approval_id=approval_id,
            kind=kind,
            summary=summary,
            digest=digest,
        )
        return record

    async def decision(
        self,
        record: ApprovalRecord,
        timeout_s: float | None = None,
        on_timeout: OnTimeout = "remind",
        escalate_to: Role = "admin",
    ) -> ApprovalRecord:
        """Wait for a person's decision on a request: however long, or with `timeout_s`
        until that long after the request (a durable timer, which holds across restarts
        and hand-overs). Then `remind` sends a reminder and waits as long again;
        `escalate` hands the request to `escalate_to` (only that role decides it from
        then on) and waits; the others decide "reject" as `timeout` (the caller tells
        reject, skip and fail apart)."""

        def decided() -> bool:
            return record.decision is not None

        if timeout_s is None or (on_timeout == "escalate" and record.role == escalate_to):
            await workflow.wait_condition(decided)
            return record
        period = timedelta(seconds=timeout_s)
        deadline = record.requested_at + period
        if on_timeout == "remind":  # the next reminder due, after a hand-over too
            missed = (self._now() - record.requested_at) // period
            deadline = record.requested_at + (missed + 1) * period
        while not decided():
            left = (deadline - self._now()).total_seconds()
            try:
                if left <= 0:
                    raise TimeoutError
                await workflow.wait_condition(decided, timeout=left)
            except TimeoutError:
                if on_timeout == "escalate":
                    self._escalate(record, escalate_to, timeout_s)
                    await workflow.wait_condition(decided)
                    break
                if on_timeout != "remind":
                    comment = f"no decision within {timeout_s:g} s ({on_timeout})"
                    self.decide(
                        ApprovalDecision(
                            approval_id=record.approval_id,
                            decision="reject",
                            actor=TIMEOUT_ACTOR,
                            comment=comment,
                        )
                    )
                    break
                self._events.emit(
                    "approval.reminder",
                    record.step_id,
                    approval_id=record.approval_id,
                    summary=record.summary,
                    waiting_s=(self._now() - record.requested_at).total_seconds(),
                )
                deadline += period
        return record

    def _escalate(self, record: ApprovalRecord, role: Role, waited_s: float) -> None:
        """Hand an unanswered request to `role`: from now on only it decides."""
        record.role = role
        detail = f"{record.approval_id} (step {record.step_id}) to {role}: no decision within"
        self._audit.record(TIMEOUT_ACTOR, "escalate", f"{detail} {waited_s:g} s", event=False)
        self._events.emit(
            "approval.escalated",
            record.step_id,
            approval_id=record.approval_id,
            summary=record.summary,
            role=role,
            digest=record.digest,
        )
        self._on_change()

    def refusal(self, decision: ApprovalDecision) -> tuple[str, str] | None:
        """Why a decision cannot be taken, as (kind, message): "UnknownApproval" or
        "AlreadyDecided" (naming the decision that won); None if it can."""
        record = self.records.get(decision.approval_id)
        if record is None and decision.approval_id in self.archived:
            return "AlreadyDecided", (
                f"approval '{decision.approval_id}' was already decided (see the audit trail)"
            )
        if record is None:
            return "UnknownApproval", f"the run has no approval '{decision.approval_id}'"
        if record.decision is not None:
            return "AlreadyDecided", (
                f"approval '{record.approval_id}' was already decided: "
                f"{record.decision} by {record.decided_by}"
            )
        by_the_run = decision.actor == TIMEOUT_ACTOR
        return bound_refusal(record, decision.digest, decision.roles, by_the_run=by_the_run)

    def decide(self, decision: ApprovalDecision) -> ApprovalRecord | None:
        """Take a person's decision and return the decided request; None (and nothing
        changes) if the request is unknown or already decided."""
        if self.refusal(decision) is not None:
            return None
        record = self.records[decision.approval_id]
        del self.undecided[decision.approval_id]
        record.decision = decision.decision
        record.decided_at = self._now()
        record.decided_by = decision.actor
        record.comment = decision.comment
        detail = f"{record.approval_id} (step {record.step_id})"
        if record.digest is not None:
            detail += f" digest {record.digest}"
        if decision.comment:
            detail += f": {decision.comment}"
        self._audit.record(decision.actor, decision.decision, detail, event=False)
        self._events.emit(
            "approval.decided",
            record.step_id,
            approval_id=record.approval_id,
            kind=record.kind,
            decision=decision.decision,
            by=decision.actor,
            comment=decision.comment,
        )
        return _decided(record)

    def close(self) -> None:
        """An ended run waits for nobody."""
        self.undecided.clear()

    def pending(self) -> list[PendingApproval]:
        """The requests still to decide, as status lists them."""
        fields = set(PendingApproval.model_fields)
        return [
            PendingApproval.model_validate(a.model_dump(include=fields))
            for a in self.undecided.values()
        ]

    def listed(self, whole: int | None = None) -> list[ApprovalRecord]:
        """Every request, decided ones without their arguments (those are in history and
        the audit trail): what a hand-over carries. With `whole`, decided requests before
        the latest `whole` have their summary and comment cut short: what status shows,
        which stays small however many requests a run has."""
        records = [_decided(a) for a in self.records.values()]
        if whole is None or len(records) <= whole:
            return records
        return [_short(a) for a in records[:-whole]] + records[-whole:]

    def archive(self, approval_ids: list[str]) -> None:
        """Forget decided requests stored away; their ids stay taken."""
        for approval_id in approval_ids:
            del self.records[approval_id]
            self.archived[approval_id] = None

    def waits(self) -> list[str]:
        """One line per open request, for the Web UI."""
        return [f"{a.approval_id} (step {a.step_id})" for a in self.undecided.values()]


def _decided(record: ApprovalRecord) -> ApprovalRecord:
    if record.decision is None or record.arguments is None:
        return record
    return record.model_copy(update={"arguments": None})


def _short(record: ApprovalRecord) -> ApprovalRecord:
    if record.decision is None:
        return record
    return record.model_copy(
        update={
            "summary": cut(record.summary, SHORT_CHARS),
            "comment": cut(record.comment, SHORT_CHARS) if record.comment else None,
        }
    )
