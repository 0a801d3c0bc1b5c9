"""The budget ledger: what a run has used, its limits, and the checkpoint every model or
tool call passes, where pauses (asked for, or for an exhausted budget) hold the run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from temporalio import workflow

from workflows.audit import AuditLog
from workflows.changes import changed
from workflows.common import Clock, StepFailed
from workflows.events import EventLog

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import (
        LIVE_RUN_STATUSES,
        Budget,
        BudgetView,
        ChildRun,
        ControlRequest,
        Limits,
        LimitUse,
        ModelUsage,
        PauseReason,
        Price,
        Usage,
    )

CallKind = Literal["model", "tool"]
# The limits a child run's budget is carved from; time is not carved: a child has what is
# left of its parent's.
CARVED = (
    "max_input_tokens",
    "max_output_tokens",
    "max_cost_usd",
    "max_model_calls",
    "max_tool_calls",
)


class Ledger:
    """Usage against limits; a call is counted when it passes the checkpoint."""

    def __init__(
        self,
        now: Clock,
        audit: AuditLog,
        on_change: Callable[[], None],
        *,
        events: EventLog,
        budget: Budget,
        prices: dict[str, Price],
        started: datetime,
    ) -> None:
        self._now = now
        self._audit = audit
        self._on_change = on_change
        self._events = events
        self._prices = prices
        self.budget = budget
        self.started = started
        self.ended: datetime | None = None  # set as the run ends: its time stops there
        self.usage = Usage()
        self.pause_request: ControlRequest | None = None
        self.exhausted: list[str] = []
        # Why the checkpoint holds the run (set by admit), and the error of a model that
        # stayed unavailable for the whole retry window (set while a call waits).
        self._held: PauseReason | None = None
        self.model_down: str | None = None
        # What the watchdog saw while a stalled agent waits for a person (workflows/agent/
        # watchdog.py); its approval decides, not a resume.
        self.stalled: str | None = None
        # Why the run is being stopped (cancelled, out of time): no call passes after.
        self.stopping: str | None = None
        # Child runs, by run id: a live one is charged what was carved for it (or what it
        # reported, if more), an ended one what it used (see workflows/children.py).
        self.children: dict[str, ChildRun] = {}

    def restore(
        self, usage: Usage, budget: Budget, started: datetime, pause: ControlRequest | None
    ) -> None:
        """Take over what an earlier history segment used and was told."""
        self.usage = usage
        self.budget = budget
        self.started = started
        self.pause_request = pause

    # --- what people change -------------------------------------------------------------

    def pause(self, request: ControlRequest) -> None:
        """Hold the run at its next checkpoint."""
        self._audit.record(request.actor, "pause", request.reason, event=False)
        self._events.emit("run.paused", reason="requested", by=request.actor, detail=request.reason)
        self.pause_request = request

    def resume(self, request: ControlRequest) -> None:
        """Lift a pause a person asked for, or one for an unavailable model (which is then
        asked again); a budget pause needs a bigger budget."""
        self._audit.record(request.actor, "resume", request.reason, event=False)
        self._events.emit("run.resumed", by=request.actor, detail=request.reason)
        self.pause_request = None
        self.model_down = None

    def pause_refusal(self) -> tuple[str, str] | None:
        """Why a pause cannot be asked for now, as (kind, message), or None."""
        if self.pause_request is not None:
            return "AlreadyPaused", f"the run is already paused by {self.pause_request.actor}"
        return None

    def resume_refusal(self) -> tuple[str, str] | None:
        """Why there is nothing to resume, as (kind, message), or None."""
        if self.pause_request is not None or self.model_down is not None:
            return None
        if self.stalled is not None:
            return "NotPaused", (
                "the run stalled and waits for a decision on its `stalled` approval: approve "
                "with guidance in the comment to go on, or reject to fail it"
            )
        if self._held == "budget":
            return "NotPaused", (
                "the run holds for its budget (" + ", ".join(self.exhausted) + "); "
                "raise the limits instead"
            )
        return "NotPaused", "the run is not paused"

    def set_limits(self, limits: Limits, actor: str) -> None:
        """Change limits; unset ones stay as they are."""
        given = limits.model_dump(exclude_none=True)
        self.budget = self.budget.model_copy(update=given)
        self._audit.record(actor, "budget", json.dumps(given, sort_keys=True), event=False)
        self._events.emit("budget.changed", by=actor, limits=given)

    # --- what the run uses --------------------------------------------------------------

    def add_usage(self, model: str, input_tokens: int, output_tokens: int) -> None:
        """Add the tokens of a model call (counted at its checkpoint) and their price."""
        self.usage.input_tokens += input_tokens
        self.usage.output_tokens += output_tokens
        price = self._prices.get(model)
        if price is not None:
            cost = (input_tokens * price.input + output_tokens * price.output) / 1_000_000
            self.usage.cost_usd = round(self.usage.cost_usd + cost, 6)
        usage = self.usage
        self._events.emit(
            "usage",
            model=model,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_input_tokens=usage.input_tokens,
            total_output_tokens=usage.output_tokens,
            cost_usd=usage.cost_usd,
        )

    def count(self, usage: ModelUsage | None) -> None:
        """Add what a model call reported it used, if it reported anything."""
        if usage is not None:
            self.add_usage(usage.model, usage.input_tokens, usage.output_tokens)
            self.recovered(usage.recovering_s)

    def recovered(self, seconds: float) -> None:
        """A model call waited `seconds` for longrun to recover: not the run's work."""
        if seconds > 0 and changed("recovery-not-counted"):
            self.usage.recovering_s = round(self.usage.recovering_s + seconds, 3)

    def count_undo(self) -> None:
        """Count an undo call: counted, but never held back, since undo must run."""
        self.usage.tool_calls += 1

    def elapsed_s(self) -> float:
        """Seconds since the run started (across continue-as-new), until it ended."""
        return ((self.ended or self._now()) - self.started).total_seconds()

    def time_left(self) -> float | None:
        """Seconds until a time budget that fails the run is used up (None: no such
        budget)."""
        if self.budget.on_budget_exhausted != "fail":
            return None
        return self.time_budget_left()

    def worked_s(self) -> float:
        """What the time budget counts: the run's age less what its model calls waited for
        longrun to recover."""
        return self.elapsed_s() - self.usage.recovering_s

    def time_budget_left(self) -> float | None:
        """Seconds left of the run's time budget (None: it has none)."""
        limit = self.budget.max_duration_s
        return None if limit is None else max(0.0, limit - self.worked_s())

    def time_up(self) -> str:
        """Why a run whose time budget is used up fails."""
        return f"the run's time budget ({self.budget.max_duration_s:g} s) is used up"

    def used(self) -> dict[str, float]:
        """What the run has used (its child runs included), by the name of the limit it
        counts against."""
        used = {**_spent(self.usage), "max_duration_s": self.worked_s()}
        for child in self.children.values():
            spent = _spent(child.usage)
            live = child.status in LIVE_RUN_STATUSES
            for name in CARVED:
                carved = getattr(child.budget, name)
                charge = max(carved, spent[name]) if live and carved is not None else spent[name]
                used[name] += charge
        return used

    def carve(self, wants: Limits | None) -> Budget:
        """A new child run's budget: what it asks for, within what this run has left (all
        of it for a limit it does not ask about); time is what is left of this run's."""
        used = self.used()
        limits: dict[str, float | None] = {}
        for name in CARVED:
            limit = getattr(self.budget, name)
            want = getattr(wants, name) if wants is not None else None
            if limit is None:
                limits[name] = want
            else:
                room = _room(name, limit, used[name])
                limits[name] = room if want is None else min(want, room)
        time_left = None
        if self.budget.max_duration_s is not None:
            time_left = max(0.0, self.budget.max_duration_s - self.worked_s())
        want_time = wants.max_duration_s if wants is not None else None
        limits["max_duration_s"] = _least(time_left, want_time)
        return Budget.model_validate(
            {**limits, "on_budget_exhausted": self.budget.on_budget_exhausted}
        )

    def regrant(self) -> list[tuple[str, Limits]]:
        """Give live child runs held short of what they asked for what this run has left,
        oldest first; the changed limits, by child run id, for the caller to send."""
        grants: list[tuple[str, Limits]] = []
        for child in self.children.values():
            if child.status not in LIVE_RUN_STATUSES:
                continue
            changes: dict[str, float] = {}
            used = self.used()
            spent = _spent(child.usage)
            for name in CARVED:
                limit = getattr(self.budget, name)
                if limit is None:
                    continue
                carved = getattr(child.budget, name)
                base = carved if carved is not None else spent[name]
                want = getattr(child.wants, name)
                room = _room(name, limit, used[name])
                if room <= 0 or (want is not None and base >= want):
                    continue
                changes[name] = base + room if want is None else min(want, base + room)
            if changes:
                limits = Limits.model_validate(changes)
                child.budget = child.budget.model_copy(update=changes)
                grants.append((child.run_id, limits))
        return grants

    def exhausted_limits(self) -> list[str]:
        """The limits used up."""
        limits = self.budget.model_dump()
        return [name for name, used in self.used().items() if _reached(limits[name], used)]

    def view(self) -> BudgetView:
        """The budget as status shows it."""
        limits = self.budget.model_dump()
        return BudgetView(
            limits={
                name: LimitUse(limit=limits[name], used=used) for name, used in self.used().items()
            },
            on_budget_exhausted=self.budget.on_budget_exhausted,
        )

    def total_usage(self) -> Usage:
        """What the run and its child runs have used (as the children last reported)."""
        total = self.usage.model_copy()
        for child in self.children.values():
            u = child.usage
            total.model_calls += u.model_calls
            total.tool_calls += u.tool_calls
            total.input_tokens += u.input_tokens
            total.output_tokens += u.output_tokens
            total.cost_usd = round(total.cost_usd + u.cost_usd, 6)
        return total

    def usage_now(self) -> Usage:
        """A copy of usage with the duration so far (a query must not change state)."""
        return self.usage.model_copy(update={"duration_s": self.elapsed_s()})

    # --- the checkpoint -----------------------------------------------------------------

    def admit(self, kind: CallKind) -> bool:
        """Count a call and let it go (True), or record why the run holds (False); a used-up
        time budget with `on_budget_exhausted: fail` fails the run."""
        exhausted = self.exhausted_limits()
        if "max_duration_s" in exhausted and self.budget.on_budget_exhausted == "fail":
            raise StepFailed(self.time_up())
        if not exhausted and self.pause_request is None:
            if self._held is not None:
                self._held = None
                self.exhausted = []
                self._on_change()
            if kind == "model":
                self.usage.model_calls += 1
            else:
                self.usage.tool_calls += 1
            return True
        reason: PauseReason = "budget" if exhausted else "requested"
        if (reason, exhausted) != (self._held, self.exhausted):
            self._held, self.exhausted = reason, exhausted
            if exhausted:
                detail = "budget exhausted: " + ", ".join(exhausted)
                self._audit.record("longrun", "paused", detail, event=False)
                self._events.emit("run.paused", reason="budget", detail=detail)
            self._on_change()
        return False

    async def checkpoint(self, kind: CallKind) -> None:
        """Before every model or tool call: wait out a pause, stop at an exhausted budget,
        then count the call at once, so parallel steps cannot overshoot a limit together."""
        if self.stopping:  # work that outlived its cancellation goes no further
            raise asyncio.CancelledError(self.stopping)
        while not self.admit(kind):
            # Wait until something that decided this pause changes, then look again.
            await self._until_changed(self._snapshot())

    async def unpaused(self) -> None:
        """Wait while a person's pause holds the run."""
        await workflow.wait_condition(lambda: self.pause_request is None)

    async def wait_for_model(self, error: str) -> None:
        """Hold the run after a model stayed unavailable for the whole retry window, until
        a person resumes it; the caller then asks the model again."""
        if self.model_down is None:
            self._audit.record("longrun", "paused", f"model unavailable: {error}", event=False)
            self._events.emit("run.paused", reason="model_unavailable", detail=error)
        self.model_down = error
        self._on_change()
        await workflow.wait_condition(lambda: self.model_down is None)
        self._on_change()

    @property
    def pause_reason(self) -> PauseReason | None:
        """Why the run holds, if it does."""
        if self.stalled is not None:
            return "stalled"
        return "model_unavailable" if self.model_down is not None else self._held

    @property
    def pause_detail(self) -> str | None:
        """What a pause for the model or a stall says about itself."""
        return self.stalled or self.model_down

    def end(self) -> None:
        """An ended run is paused no more, and its time used stays as it was at the end
        (what later reads of it, live or kept, all answer)."""
        self.ended = self._now()
        self._held = None
        self.model_down = None
        self.stalled = None

    async def _until_changed(self, seen: tuple[bool, list[str]]) -> None:
        await workflow.wait_condition(lambda: self._snapshot() != seen)

    def _snapshot(self) -> tuple[bool, list[str]]:
        return self.pause_request is None, self.exhausted_limits()


def _reached(limit: float | None, used: float) -> bool:
    return limit is not None and used >= limit


def _spent(usage: Usage) -> dict[str, float]:
    return {
        "max_input_tokens": usage.input_tokens,
        "max_output_tokens": usage.output_tokens,
        "max_cost_usd": usage.cost_usd,
        "max_model_calls": usage.model_calls,
        "max_tool_calls": usage.tool_calls,
    }


def _room(name: str, limit: float, used: float) -> float:
    """What is left of a limit: whole calls and tokens, cost to the micro-dollar."""
    left = max(0.0, limit - used)
    return round(left, 6) if name == "max_cost_usd" else int(left)


def _least(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)
