"""The hand-over: what one history segment of a run carries to the next when it continues
as new, and how the next one takes it over."""

from __future__ import annotations

import asyncio
from typing import Any, NoReturn

from temporalio import workflow

from workflows import stored
from workflows.changes import baseline_retired, changed
from workflows.parts import RunParts
from workflows.steps import AGENT_STEPS_KEPT, LISTED_OUTPUT_CHARS, OPEN, PREVIEW_CHARS, listed

with workflow.unsafe.imports_passed_through():
    from longrun import plans
    from longrun.contracts import AgentCarry, Plan, RunCarry

# Well under Temporal's 2 MB payload limit, beside the run's own input (a plan is at most
# the API's 1 MB request).
CARRY_MAX_BYTES = 512 * 1024
AUDIT_KEPT = 100  # the newest audit entries stay in the carry when older ones are stored


class HandOver:
    """Continue-as-new at a quiet moment, with each part's slice of the carry."""

    def __init__(self, parts: RunParts) -> None:
        self._parts = parts
        self.segment = 1
        self.underway = False  # steps stopped by a hand-over keep waiting for their approval

    def restore(self, carry: RunCarry) -> None:
        """Take over from the previous history segment."""
        p = self._parts
        self.segment = carry.segment
        p.steps.restore(carry.steps, carry.steps_dropped)
        # After the steps: it reads who waits.
        p.approvals.restore(carry.approvals, carry.approvals_archived)
        p.ledger.restore(carry.usage, carry.budget, carry.started, carry.pause_request)
        p.audit.entries = carry.audit
        p.audit.archived = carry.archived
        p.events.restore(carry.events, carry.next_event_id, carry.events_archived, carry.figures)
        p.requests.restore(carry.outcomes, carry.deferred_decisions)
        p.undo.restore(carry.completed_calls, carry.compensate_on_cancel)
        p.children.restore(carry.children)
        p.reporting.sent = carry.reports_sent
        p.calls.workspace_used = carry.workspace_used
        if carry.say_continued:
            now = p.display.version()
            moved = carry.version if carry.version != now else None
            p.events.emit("run.continued", segment=carry.segment, version=now, moved_from=moved)

    def due(self, settled: int) -> bool:
        """Whether to continue as new, after `settled` steps ended in this segment: enough
        of them, Temporal suggests it, or another worker version became current (the run
        moves to it)."""
        info = workflow.info()
        return (
            settled >= self._parts.inp.config.continue_as_new_every
            or info.is_continue_as_new_suggested()
            or (
                info.is_target_worker_deployment_version_changed()
                and changed("hand-over-to-current-version")
            )
        )

    async def hand_over(
        self, running: dict[str, asyncio.Task[None]], agent: AgentCarry | None = None
    ) -> NoReturn:
        """Continue as new: stop the steps that only wait for a person (their approvals
        travel along and are waited on again), let handlers finish, pass the state on."""
        self.underway = True
        for task in running.values():
            task.cancel()
        await asyncio.gather(*running.values(), return_exceptions=True)
        # A signal that arrives after this point makes the server refuse the hand-over;
        # the task runs again with it, so no signal is lost.
        await workflow.wait_condition(workflow.all_handlers_finished)
        self._parts.audit.record(
            "longrun", "continued as new", f"segment {self.segment + 1}", event=False
        )
        said_by_next = changed("continued-said-by-next-segment")
        if not said_by_next:
            self._parts.events.emit("run.continued", segment=self.segment + 1)
        await self._archive_events()
        bounded = _size(self.carry(agent)) > CARRY_MAX_BYTES
        if bounded:
            baseline_retired()
            await self._bound(agent)
        await self._quiesce()
        # Taken after the last wait, so what handlers changed meanwhile travels too.
        carry = self.carry(agent, preview=PREVIEW_CHARS if bounded else None)
        carry.say_continued = said_by_next
        # The next segment starts on the deployment's current version: pinned runs pick
        # up a deploy's code here (longrun/versions.py).
        workflow.continue_as_new(
            self._parts.inp.model_copy(update={"carry": carry}),
            initial_versioning_behavior=workflow.ContinueAsNewVersioningBehavior.AUTO_UPGRADE,
        )

    async def _quiesce(self) -> None:
        """Wait until no webhook delivery, budget change to a child or report to a parent is
        under way (none outlives its segment) and no handler runs."""
        p = self._parts
        while True:
            await p.webhooks.settle()
            await p.children.settle()
            await p.reporting.settle()
            await workflow.wait_condition(workflow.all_handlers_finished)
            if not p.webhooks.pending:
                return

    async def _archive_events(self) -> None:
        """Store all but the latest events away, so the log a hand-over carries stays
        short however long the run; `GET /v1/runs/{id}/events` reads them back."""
        events = self._parts.events
        older = events.older()
        if not older:
            return
        baseline_retired()
        artifacts = await self._archive([("events", e.model_dump(mode="json")) for e in older])
        events.forget(len(older), artifacts)

    async def _archive(self, records: list[tuple[str, dict[str, Any]]]) -> list[str]:
        """Store records of a kind ("audit", "approvals", "events") in chunks; the ids of
        the artifacts holding them, oldest first (api/archive.py reads them back)."""
        artifacts = []
        for chunk in _chunks(records):
            ref = (await stored.keep(self._parts.inp.run_id, {"archive": chunk}))["archive"]
            artifacts.append(ref["artifact"])
        return artifacts

    async def _bound(self, agent: AgentCarry | None) -> None:
        """Bring the carry within its bound: outputs nobody needs as short previews (see
        `carry`), then the biggest needed outputs stored whole, then earlier audit entries
        and decided approvals stored away; what is stored goes by reference."""
        p = self._parts
        run_id = p.inp.run_id
        carry = self.carry(agent, preview=PREVIEW_CHARS)
        over = _size(carry) - CARRY_MAX_BYTES
        if over > 0:
            outputs = {s.id: s.output for s in carry.steps if s.output is not None}
            room = sum(stored.size(o) for o in outputs.values()) - over
            kept = await stored.fit(run_id, outputs, max(room, 0))
            for step_id, output in kept.items():
                if output is not outputs[step_id]:
                    p.steps.by_id[step_id].output = output
            carry = self.carry(agent, preview=PREVIEW_CHARS)
        if _size(carry) > CARRY_MAX_BYTES:
            entries = p.audit.entries[:-AUDIT_KEPT]
            decided = [a for a in p.approvals.listed() if a.decision is not None]
            p.audit.archived += await self._archive(
                [("audit", e.model_dump(mode="json")) for e in entries]
                + [("approvals", a.model_dump(mode="json")) for a in decided]
            )
            del p.audit.entries[: len(entries)]
            p.approvals.archive([a.approval_id for a in decided])

    def carry(self, agent: AgentCarry | None = None, preview: int | None = None) -> RunCarry:
        """What the next segment starts from; outputs nobody needs are cut to `preview`
        characters when given."""
        p = self._parts
        steps = list(p.steps.by_id.values())
        dropped = p.steps.dropped
        limit = LISTED_OUTPUT_CHARS if preview is None else preview
        if p.inp.plan is not None:
            # Outputs later steps refer to, and the result's, travel whole; the rest are
            # in history already and travel as previews.
            needed = self._needed_outputs(p.inp.plan)
            steps = [s if s.id in needed else listed(s, limit) for s in steps]
        if agent is not None:
            # An agent's tool calls are referenced by nobody later: the recent ones travel,
            # big outputs previewed, the rest are counted.
            dropped += max(0, len(steps) - AGENT_STEPS_KEPT)
            steps = [listed(s, limit) for s in steps[-AGENT_STEPS_KEPT:]]
        return RunCarry(
            segment=self.segment + 1,
            started=p.ledger.started,
            steps=steps,
            steps_dropped=dropped,
            # A decided approval's arguments are in history already; its record travels
            # on so that approval ids stay unique.
            approvals=p.approvals.listed(),
            usage=p.ledger.usage,
            budget=p.ledger.budget,
            audit=p.audit.entries,
            completed_calls=p.undo.calls,
            pause_request=p.ledger.pause_request,
            compensate_on_cancel=p.undo.compensate_on_cancel,
            workspace_used=p.calls.workspace_used,
            agent=agent,
            archived=p.audit.archived,
            approvals_archived=list(p.approvals.archived),
            events=p.events.events,
            next_event_id=p.events.next_id,
            events_archived=p.events.archived,
            figures=p.events.figures,
            outcomes=p.requests.listed(),
            deferred_decisions=p.requests.listed_deferred(),
            children=p.children.listed(),
            reports_sent=p.reporting.sent,
            version=p.display.version(),
        )

    def _needed_outputs(self, plan: Plan) -> set[str]:
        """Steps whose outputs are still needed: referenced by a step yet to end, or part
        of the result (no step depends on them)."""
        steps = self._parts.steps.by_id
        depended_on = {d for s in plan.steps for d in (s.depends_on or [])}
        needed = {s.id for s in plan.steps if s.id not in depended_on}
        for step in plan.steps:
            if steps[step.id].status in OPEN:
                needed |= plans.referenced_steps(step)
        return needed


def _size(carry: RunCarry) -> int:
    return stored.size(carry.model_dump(mode="json"))


def _chunks(items: list[tuple[str, dict[str, Any]]]) -> list[dict[str, list[dict[str, Any]]]]:
    """Archive records ("audit", "approvals" or "events", each kind in order) grouped into
    chunks that each fit one `artifacts.keep` call."""
    chunks: list[dict[str, list[dict[str, Any]]]] = []
    chunk: dict[str, list[dict[str, Any]]] = {}
    used = 0
    for kind, record in items:
        record_size = stored.size(record)
        if used and used + record_size > stored.BATCH_MAX_BYTES // 2:
            chunks.append(chunk)
            chunk, used = {}, 0
        chunk.setdefault(kind, []).append(record)
        used += record_size
    if used:
        chunks.append(chunk)
    return chunks
