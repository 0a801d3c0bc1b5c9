"""The parts one run is made of, built together: the workflow, its plan scheduler and its
agent loop all work through them."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

from workflows.approvals import Approvals
from workflows.audit import AuditLog
from workflows.calls import Calls
from workflows.children import Children
from workflows.common import Clock
from workflows.counterfactual import Counterfactual
from workflows.events import EventLog
from workflows.ledger import Ledger
from workflows.reporting import Reporting
from workflows.requests import Requests
from workflows.standing import Standing
from workflows.status import Display, StatusBoard
from workflows.steps import StepBook
from workflows.undo import UndoLog
from workflows.webhooks import Webhooks

with workflow.unsafe.imports_passed_through():
    from longrun.catalogue import toolbox
    from longrun.contracts import AuditEntry, ChildReport, RunInput
    from longrun.grants import grant_of


class RunParts:
    """Event log, audit trail, step book, budget ledger, approvals, undo log, calls, child
    runs, status and reports to a parent of one run; each owns its state and its slice of
    what a hand-over carries."""

    def __init__(self, inp: RunInput, now: Clock, display: Display) -> None:
        self.inp = inp
        self.display = display
        started = now()
        submitted = AuditEntry(at=started, actor=inp.owner, action="submitted", detail=inp.goal)
        first = [submitted]
        if inp.reuse is not None:  # a retry or fork: checked against the policy in force
            detail = f"{inp.reuse.run_id} started again under policy {inp.config.policy.digest()}"
            first.append(AuditEntry(at=started, actor=inp.owner, action="policy", detail=detail))
        self.events = EventLog(now)
        self.audit = AuditLog(now, first, self.events)
        self.steps = StepBook(now, self.refresh, self.events)
        self.ledger = Ledger(
            now,
            self.audit,
            self.refresh,
            events=self.events,
            budget=inp.budget,
            prices=inp.config.prices,
            started=started,
        )
        self.approvals = Approvals(
            now, self.audit, self.steps, self.refresh, self.events, inp.config.policy.digest()
        )
        # Built-in tools and the MCP tools the run was submitted with.
        self.tools = toolbox(inp.mcp_tools)
        self.undo = UndoLog(self.audit, self.tools)
        self.requests = Requests(self.approvals.decide, self.approvals.refusal)
        self.standing = Standing(inp, self.audit)
        self.approvals.on_open = self.requests.release
        window = timedelta(seconds=inp.config.model_retry_window_s)
        counterfactual = Counterfactual(inp.reuse, self.audit)
        self.calls = Calls(
            inp.run_id, self.ledger, window, grant_of(inp), counterfactual, self.tools
        )
        self.webhooks = Webhooks(inp.run_id, inp.config.webhooks)
        if inp.config.webhooks:
            self.events.listen(self.webhooks.notify)
        policy = inp.config.policy
        self.children = Children(
            inp,
            self.ledger,
            self.undo,
            self.audit,
            self.events,
            self.refresh,
            lambda: [name for name in self.tools if policy.allows(name)],
        )
        self.status = StatusBoard(
            inp, self.steps, self.approvals, self.ledger, self.events, display, self.children
        )
        self.reporting = Reporting(inp.parent_run_id, self._report)

    def refresh(self) -> None:
        """Show what changed: status, its search attribute, the Web UI's details, and (for
        a child run) its parent."""
        self.status.refresh()
        self.reporting.notice()

    def _report(self) -> ChildReport:
        """This (child) run as its parent sees it."""
        state = self.status
        return ChildReport(
            run_id=self.inp.run_id,
            seq=0,
            status=state.status,
            pause_reason=self.ledger.pause_reason or self.children.held(),
            pending_approvals=[*self.approvals.pending(), *self.children.pending()],
            usage=self.ledger.total_usage(),
        )
