"""What a run shows: the `status` query's answer, the Web UI's current details and the
status search attribute, kept current as the run moves."""

from __future__ import annotations

from dataclasses import astuple, dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from temporalio import workflow
from temporalio.common import SearchAttributeUpdate

from workflows.approvals import Approvals
from workflows.changes import baseline_retired, changed
from workflows.children import Children
from workflows.common import searchable, version
from workflows.events import EventLog
from workflows.ledger import Ledger
from workflows.steps import (
    AGENT_STEPS_KEPT,
    LISTED_OUTPUT_CHARS,
    PREVIEW_CHARS,
    StepBook,
    listed,
    shown,
)

with workflow.unsafe.imports_passed_through():
    from longrun.attributes import PROGRESS_KEYS, STATUS_ATTRIBUTE
    from longrun.contracts import LIVE_RUN_STATUSES, RunInput, RunState, RunStatusName

STATUS_OUTPUT_CHARS = 500_000  # of all outputs in status together
# Each upsert is a history event: steps done, cost and phase are published at most this
# often (and whenever status or pending approvals change, and at the end); status and
# pending approvals, what people filter on to find runs that wait for them, at once.
PROGRESS_EVERY = timedelta(seconds=10)
# Runs started with `progress-by-count`: at most every this many changes of it instead.
PROGRESS_EVERY_CHANGES = 10
# Decided approvals listed with their whole summary and comment; older ones are cut short.
APPROVALS_LISTED_WHOLE = 100


class AgentView(Protocol):
    """What status asks of a goal-only run's agent loop."""

    @property
    def phase(self) -> str:
        """The loop's phase: planning, acting, verifying, replanning or completing."""

    def describe(self, state: RunState) -> None:
        """Add the agent's view to a status answer."""

    def progress(self) -> str:
        """One line for the Web UI's current details."""

    def counts(self) -> tuple[int, int]:
        """Plan steps done and planned so far."""


@dataclass(frozen=True)
class Progress:
    """What the run publishes for listing and filtering runs (the search attributes)."""

    status: RunStatusName
    phase: str
    steps_done: int
    steps_total: int
    cost_usd: float
    pending_approvals: int

    def updates(self, shown: Progress | None) -> list[SearchAttributeUpdate[Any]]:
        """Upserts for what differs from what was shown."""
        pairs: list[SearchAttributeUpdate[Any]] = []
        before = astuple(shown) if shown is not None else None
        for i, (key, value) in enumerate(zip(PROGRESS_KEYS, astuple(self), strict=True)):
            if before is None or value != before[i]:
                pairs.append(key.value_set(value))
        return pairs

    def urgent(self, shown: Progress | None) -> bool:
        """Whether what people filter on changed, so it is published at once."""
        return (
            shown is None
            or self.status != shown.status
            or self.pending_approvals != shown.pending_approvals
        )


class Display(Protocol):
    """Where a run's status is shown besides the `status` query."""

    def details(self, text: str) -> None:
        """Show the run's current details (the Web UI's)."""

    def status(self, status: RunStatusName) -> None:
        """Publish a new run status (the search attribute), as runs before progress
        attributes did."""

    def progress(self, progress: Progress, final: bool) -> bool:
        """Publish the run's progress if due; False if this run does not (it predates
        progress attributes), and then `status` is how its status is published."""

    def version(self) -> str | None:
        """The build id of the worker version running the run now (None: unversioned)."""


class ProgressGate:
    """Decides when progress is published: what people filter on at once, the rest with
    it, at the end, or when due: every `every_changes` changes of it (runs started with
    `progress-by-count`) or else every PROGRESS_EVERY of workflow time. A count decides
    the same on replay whichever workflow task a change landed in; a clock read in a task
    that replay merges with the next can decide otherwise. `shown`: what the run was
    started showing, as of `now`."""

    def __init__(
        self,
        shown: Progress | None = None,
        now: datetime | None = None,
        every_changes: int | None = None,
    ) -> None:
        self._shown = shown
        self._shown_at = now if shown is not None else None
        self._every = every_changes
        self._seen = shown
        self._changes = 0

    def updates(
        self, progress: Progress, now: datetime, final: bool
    ) -> list[SearchAttributeUpdate[Any]]:
        """What to upsert now; empty when nothing changed or it is not due yet."""
        if progress != self._seen:
            self._seen, self._changes = progress, self._changes + 1
        if progress == self._shown:
            return []
        if self._every is not None:
            due = self._shown is None or self._changes >= self._every
        else:
            due = self._shown_at is None or now - self._shown_at >= PROGRESS_EVERY
        if not (final or due or progress.urgent(self._shown)):
            return []
        updates = progress.updates(self._shown)
        self._shown, self._shown_at, self._changes = progress, now, 0
        return updates


def started_showing() -> Progress | None:
    """The progress a run's start search attributes show, when they show all of it (the API
    sets them as a run's first publish would, so it need not upsert them again)."""
    found = workflow.info().typed_search_attributes
    values: list[Any] = [found.get(key) for key in PROGRESS_KEYS]
    if any(value is None for value in values):
        return None
    return Progress(*values)


class TemporalDisplay:
    """The Web UI's current details and the search attributes of this workflow."""

    def __init__(self) -> None:
        # A run started without the status search attribute skips publishing rather than
        # failing its workflow tasks.
        self._publish = searchable()
        shown = started_showing() if changed("progress-at-start") else None
        counted = changed("progress-by-count")
        self._gate = ProgressGate(
            shown, workflow.now(), PROGRESS_EVERY_CHANGES if counted else None
        )

    def details(self, text: str) -> None:
        """Set the workflow's current details."""
        workflow.set_current_details(text)

    def status(self, status: RunStatusName) -> None:
        """Upsert the status search attribute, where the run has one."""
        if self._publish:
            workflow.upsert_search_attributes([STATUS_ATTRIBUTE.value_set(status)])

    def progress(self, progress: Progress, final: bool) -> bool:
        """Upsert what changed, in one history event, when due."""
        if not self._publish:
            return True
        baseline_retired()
        updates = self._gate.updates(progress, workflow.now(), final)
        if updates:
            workflow.upsert_search_attributes(updates)
        return True

    def version(self) -> str | None:
        """The build id of the worker version this workflow task runs on."""
        return version()


class StatusBoard:
    """The run's status, result and error, and how they are shown."""

    def __init__(
        self,
        inp: RunInput,
        steps: StepBook,
        approvals: Approvals,
        ledger: Ledger,
        events: EventLog,
        display: Display,
        children: Children,
    ) -> None:
        self._inp = inp
        self._children = children
        self._events = events
        self._steps = steps
        self._approvals = approvals
        self._ledger = ledger
        self._display = display
        self.agent: AgentView | None = None
        self.status: RunStatusName = "running"
        self.result: Any = None
        self.error: str | None = None

    def state(self) -> RunState:
        """Where the run stands: steps, approvals, usage, result."""
        steps, omitted = self._steps.recent(AGENT_STEPS_KEPT if self.agent else None)
        omitted += self._steps.dropped
        # Each output gets its share of the room status has, between the preview's size
        # and LISTED_OUTPUT_CHARS.
        share = STATUS_OUTPUT_CHARS // max(1, len(steps) + len(self.result or ()))
        limit = max(PREVIEW_CHARS, min(LISTED_OUTPUT_CHARS, share))
        state = RunState(
            run_id=self._inp.run_id,
            goal=self._inp.goal,
            status=self.status,
            # Bounded, so status stays well under Temporal's payload limit however long
            # the run: big outputs are previewed, an agent's old tool calls counted.
            steps=[listed(s, limit) for s in steps],
            steps_omitted=omitted,
            pending_approvals=[*self._approvals.pending(), *self._children.pending()],
            approvals=self._approvals.listed(whole=APPROVALS_LISTED_WHOLE),
            approvals_archived=list(self._approvals.archived),
            usage=self._ledger.usage_now(),
            labels=self._inp.labels,
            result={k: shown(v, limit) for k, v in self.result.items()}
            if self.agent is None and self.status == "completed" and self.result
            else self.result,
            error=self.error,
            budget=self._ledger.view(),
            pause_reason=self._ledger.pause_reason or self._children.held(),
            pause_detail=self._ledger.pause_detail,
            exhausted=self._ledger.exhausted,
            figures=self._events.figures,
            parent_run_id=self._inp.parent_run_id,
            children=self._children.listed(),
            version=self._display.version(),
        )
        if self.agent is not None:
            self.agent.describe(state)
        return state

    def refresh(self) -> None:
        """Recompute the run status, publish it as a search attribute and in the Web UI."""
        if self.status in LIVE_RUN_STATUSES:
            status: RunStatusName = "running"
            if self._ledger.pause_reason is not None or self._children.held():
                status = "paused"
            elif self._approvals.undecided or self._children.pending():
                status = "waiting_approval"
            changed, self.status = status != self.status, status
            self.publish(changed=changed)
        if self.agent is not None:
            details = [f"{self.status}: {self.agent.progress()}"]
        else:
            done, total = self._steps.done, len(self._steps.by_id)
            details = [f"{self.status}: {done}/{total} steps done"]
        if self._steps.active:
            details.append("running: " + ", ".join(self._steps.active))
        waits = self._approvals.waits()
        if waits:
            details.append("waiting for approval: " + ", ".join(waits))
        if self._ledger.stalled:
            details.append(f"stalled (decide its approval): {self._ledger.stalled}")
        if self._ledger.model_down:
            details.append(f"model unavailable (resume to ask again): {self._ledger.model_down}")
        if self.error:
            details.append(f"error: {self.error}")
        self._display.details("\n".join(details))

    def publish(self, changed: bool = True, final: bool = False) -> None:
        """Publish the run's status and progress as they are now; runs from before
        progress attributes upsert only their status, and only when asked to (`changed`)."""
        if self.agent is not None:
            phase = self.agent.phase
            done, total = self.agent.counts()
        else:
            phase = "acting"
            done, total = self._steps.done, len(self._steps.by_id)
        progress = Progress(
            status=self.status,
            phase=phase,
            steps_done=done,
            steps_total=total,
            cost_usd=self._ledger.usage.cost_usd,
            pending_approvals=len(self._approvals.undecided) + len(self._children.pending()),
        )
        if not self._display.progress(progress, final) and changed:
            self._display.status(self.status)
