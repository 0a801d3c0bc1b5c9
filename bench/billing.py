"""What a step costs in Temporal's own currency: history events and billable actions.

Starts one headless Temporal dev server and, in this process, longrun's worker and a bare
one. Each side runs the same plans, one at a time, and their histories are read back:

- a plan of N sequential no-op steps (`echo` tool steps; bare: N activities);
- the same plan whose second step waits for a person's approval (longrun: `requires_approval`,
  decided with the `decide` signal as the API sends it; bare: a signal and a wait for it).

Billable actions are counted from the history as Temporal Cloud counts them
(docs.temporal.io/cloud/actions): a workflow start, each activity scheduled (its start and
any retry), each timer started, signal, accepted update, search-attribute upsert (but for
`TemporalChangeVersion`, which is exempt), memo upsert, side-effect or local-activity marker,
child start and continue-as-new. Patch markers (`core_patch`) are version markers, not side
effects, and are left out; queries and heartbeats are not in a history and are not counted
(neither side sends any here). Cost is dollars per 1,000 steps at ACTION_PRICE_USD.

    .venv/bin/python bench/billing.py [--steps 4,20]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client
from temporalio.worker import Worker

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

with workflow.unsafe.imports_passed_through():
    from figures import Figure
    from overhead import TASK_QUEUE_CHANGES, TOOL_RETRY, noop

    from api.admission import start_run
    from longrun import wire
    from longrun.catalogue import CATALOGUE
    from longrun.contracts import ApprovalDecision, Plan, RunConfig, RunInput, Step
    from longrun.dev.stack import TemporalDevServer, free_port
    from longrun.plans import normalize_plan
    from longrun.settings import Settings
    from longrun.temporal import connect
    from worker import serving
    from workflows.common import TOOL_HEARTBEAT_TIMEOUT, TOOL_TIMEOUT

# Temporal Cloud's published price of an action on its entry plans: $50 per million.
ACTION_PRICE_USD = 50 / 1_000_000

E = EventType
_ALWAYS_BILLED = {
    E.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
    E.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
    E.EVENT_TYPE_TIMER_STARTED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
    E.EVENT_TYPE_WORKFLOW_PROPERTIES_MODIFIED,
    E.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED,
    E.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED,
    E.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
}
VERSION_ATTRIBUTE = "TemporalChangeVersion"


def billed(event: HistoryEvent) -> int:
    """The actions Temporal Cloud bills for this history event."""
    if event.event_type in _ALWAYS_BILLED:
        return 1
    if event.event_type == E.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
        fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
        return 0 if set(fields.indexed_fields) == {VERSION_ATTRIBUTE} else 1
    if event.event_type == E.EVENT_TYPE_MARKER_RECORDED:
        return 0 if event.marker_recorded_event_attributes.marker_name == "core_patch" else 1
    return 0


@dataclass
class Tally:
    """One run's history: events, billable actions, and events by type."""

    events: int
    actions: int
    by_type: Counter[str]


async def tally(client: Client, workflow_id: str) -> Tally:
    """Count the ended run's history."""
    events, actions, by_type = 0, 0, Counter[str]()
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        events += 1
        actions += billed(event)
        by_type[EventType.Name(event.event_type).removeprefix("EVENT_TYPE_").lower()] += 1
    return Tally(events, actions, by_type)


@workflow.defn(name="bench.BareApproved")
class BareApprovedWorkflow:
    """N sequential no-op activities; with `gate`, the one at that index waits for a
    signal first, as a step waits for its approval."""

    def __init__(self) -> None:
        self._approved = False

    @workflow.signal(name="approve")
    def approve(self) -> None:
        """A person's approval."""
        self._approved = True

    @workflow.run
    async def run(self, steps: int, gate: int) -> int:
        """Run `steps` no-op activities, waiting for the approval before step `gate`."""
        for i in range(steps):
            if i == gate:
                await workflow.wait_condition(lambda: self._approved)
            await workflow.execute_activity(
                noop,
                i,
                start_to_close_timeout=TOOL_TIMEOUT,
                heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=TOOL_RETRY,
            )
        return steps


async def _wait_running(client: Client, workflow_id: str, event_type: int) -> None:
    """Until the run's history holds an event of `event_type`."""
    handle = client.get_workflow_handle(workflow_id)
    while True:
        async for event in handle.fetch_history_events():
            if event.event_type == event_type:
                return
        await asyncio.sleep(0.05)


async def run_longrun(client: Client, settings: Settings, steps: int, gate: int | None) -> Tally:
    """One longrun plan of `steps` echo steps, step `gate` requiring approval, started as
    the API starts runs, each step an activity task (TASK_QUEUE_CHANGES)."""
    run_id = f"run-{uuid.uuid4().hex}"
    plan = Plan(
        steps=[
            Step(
                id=f"s{i}",
                tool="echo",
                args={"value": i},
                depends_on=[f"s{i - 1}"] if i else None,
                requires_approval=True if i == gate else None,
            )
            for i in range(steps)
        ]
    )
    inp = RunInput(
        run_id=run_id,
        goal=f"bench: {steps} no-op steps",
        plan=normalize_plan(plan, CATALOGUE),
        labels={},
        config=RunConfig(default_model="x"),
    )
    await start_run(client, settings, inp, TASK_QUEUE_CHANGES)
    handle = client.get_workflow_handle(run_id)
    if gate is not None:
        # As the API decides: once the run shows the approval it waits for.
        while True:
            state = await handle.query(wire.STATUS)
            if any(a["approval_id"] == f"apr-s{gate}" for a in state.get("approvals", [])):
                break
            await asyncio.sleep(0.05)
        decision = ApprovalDecision(approval_id=f"apr-s{gate}", decision="approve")
        await handle.signal(wire.DECIDE, decision)
    await handle.result()
    return await tally(client, run_id)


async def run_bare(client: Client, queue: str, steps: int, gate: int | None) -> Tally:
    """The same work as a bare workflow."""
    workflow_id = f"bench-bare-{uuid.uuid4().hex}"
    handle = await client.start_workflow(
        BareApprovedWorkflow.run,
        args=[steps, -1 if gate is None else gate],
        id=workflow_id,
        task_queue=queue,
        execution_timeout=timedelta(minutes=10),
    )
    if gate is not None:
        # The bare workflow waits with no event of its own: the approval follows the
        # completion of the activity before it, as a person decides after seeing it.
        if gate:
            await _wait_running(client, workflow_id, E.EVENT_TYPE_ACTIVITY_TASK_COMPLETED)
        await handle.signal(BareApprovedWorkflow.approve)
    await handle.result()
    return await tally(client, workflow_id)


@dataclass
class Billing:
    """Per case (a name: N steps, approval or not), each side's tally."""

    cases: dict[str, tuple[int, Tally, Tally]]  # name: (steps, longrun, bare)


async def measure(step_counts: list[int]) -> Billing:
    """Run every case on both sides and count their histories."""
    result = Billing({})
    with tempfile.TemporaryDirectory(prefix="longrun-bench-") as tmp:
        async with TemporalDevServer(Path(tmp) / "temporal.db", port=free_port()) as server:
            settings = Settings(
                _env_file=None,
                TEMPORAL_ADDRESS=server.address,
                LONGRUN_TASK_QUEUE=f"bench-longrun-{uuid.uuid4().hex[:8]}",
                LONGRUN_DATA_DIR=Path(tmp) / "data",
                OPENAI_BASE_URL="http://127.0.0.1:9/v1",
                OPENAI_API_KEY="x",
            )
            bare_queue = f"bench-bare-{uuid.uuid4().hex[:8]}"
            client = await connect(settings)
            async with (
                serving(client, settings),
                Worker(
                    client,
                    task_queue=bare_queue,
                    workflows=[BareApprovedWorkflow],
                    activities=[noop],
                ),
            ):
                for steps in step_counts:
                    for gate in (None, 1):
                        name = f"{steps}-step plan" + (", one approval" if gate else "")
                        mine = await run_longrun(client, settings, steps, gate)
                        bare = await run_bare(client, bare_queue, steps, gate)
                        result.cases[name] = (steps, mine, bare)
    return result


def report(result: Billing) -> None:
    """Print each case's events and actions per step, and what differs by event type."""
    print(f"{'case':<28} {'events l/b':>12} {'actions l/b':>12} {'per step l/b':>16}")
    for name, (steps, mine, bare) in result.cases.items():
        per = f"{mine.actions / steps:.2f}/{bare.actions / steps:.2f}"
        print(
            f"{name:<28} {mine.events:>5}/{bare.events:<6} {mine.actions:>5}/{bare.actions:<6} "
            f"{per:>16}"
        )
        extra = mine.by_type - bare.by_type
        if extra:
            print("    longrun's extra events: " + ", ".join(f"{k} {v}" for k, v in extra.items()))


def figures(result: Billing) -> list[Figure]:
    """The suite's figures: events and actions per step of the shortest plan with an
    approval and of the longest plain one, what each step added costs, and dollars."""
    gated = {n: c for n, c in result.cases.items() if "approval" in n}
    plain = {n: c for n, c in result.cases.items() if "approval" not in n}
    short_name = min(gated, key=lambda n: gated[n][0])
    long_name = max(plain, key=lambda n: plain[n][0])
    out: list[Figure] = []
    for name in (short_name, long_name):
        steps, mine, bare = result.cases[name]
        for what in ("events", "actions"):
            out.append(
                Figure(
                    "billing",
                    f"{what} per step, {name}",
                    what,
                    getattr(mine, what) / steps,
                    getattr(bare, what) / steps,
                    target="<= 1.2",
                )
            )
    low_name = min(plain, key=lambda n: plain[n][0])
    (low, low_mine, low_bare), (high, high_mine, high_bare) = plain[low_name], plain[long_name]
    if high > low:
        for what in ("events", "actions"):
            added = high - low
            out.append(
                Figure(
                    "billing",
                    f"{what} each step adds ({low} to {high} steps)",
                    what,
                    (getattr(high_mine, what) - getattr(low_mine, what)) / added,
                    (getattr(high_bare, what) - getattr(low_bare, what)) / added,
                )
            )
    steps, mine, bare = result.cases[long_name]
    per_1000 = 1000 * ACTION_PRICE_USD / steps
    out.append(
        Figure(
            "billing",
            f"cost, $ per 1,000 steps ({long_name}, $50 per million actions)",
            "$",
            mine.actions * per_1000,
            bare.actions * per_1000,
        )
    )
    return out


def main() -> None:
    """Parse the arguments and run the benchmark."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--steps", default="4,20", help="plan lengths, comma-separated")
    args = parser.parse_args()
    try:
        counts = [int(n) for n in args.steps.split(",")]
    except ValueError:
        parser.error("--steps takes whole numbers, e.g. 4,20")
    if any(n < 2 for n in counts):
        parser.error("--steps must be >= 2 (the approval gates the second step)")
    report(asyncio.run(measure(counts)))


if __name__ == "__main__":
    main()
