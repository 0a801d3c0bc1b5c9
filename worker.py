"""The longrun worker: hosts the run workflow and every activity on the task queue."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from temporalio.client import Client, WorkflowHistory
from temporalio.worker import PollerBehaviorAutoscaling, Replayer, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from activities.bound import activities_for
from activities.endpoint import model_problem
from activities.tools.sandbox import confinement
from longrun import wire
from longrun.artifacts import ArtifactStore, store_for
from longrun.contracts import RUN_ID_PATTERN
from longrun.heap import freeze_startup_heap
from longrun.settings import Settings, get_settings
from longrun.telemetry import configure_tracing
from longrun.temporal import (
    connect_patiently,
    described,
    ensure_search_attributes,
    exit_without_teardown,
    metrics_runtime,
)
from longrun.versions import VERSION_KEY, build_id, deployment_config, promote
from workflows import WORKFLOWS
from workflows.changes import CHANGES

log = logging.getLogger("longrun.worker")

# The sandbox runs every run with `workflows` imported once for the whole worker, not once
# per run: re-executing its modules for each run cost about 500 KB and 15 ms of CPU per run
# and made a run's first workflow task 15 times a bare one's (bench/memory.py). Safe because
# the package holds deterministic code only and no state shared between runs (no module-level
# mutable values: tests/test_layout.py checks), and the sandbox's other guard, restricted
# calls such as `datetime.now()` or `open()`, is still applied in full to every workflow
# path the saved histories replay (tests/workflows/test_replay.py replays them in the
# default sandbox).
SHARED_MODULES_SANDBOX = SandboxedWorkflowRunner(
    restrictions=SandboxRestrictions.default.with_passthrough_modules("workflows")
)
SWEEP_EVERY = timedelta(hours=1)
PATCH = "core_patch"  # the marker `workflow.patched()` records
# A folder or prefix not named like the API's run ids is not a run's to delete.
RUN_ID = re.compile(RUN_ID_PATTERN)


@asynccontextmanager
async def serving(
    client: Client, settings: Settings, workflows: Sequence[type] = WORKFLOWS
) -> AsyncIterator[Worker]:
    """A running worker on the task queue: the run workflow and every activity, and the
    artifact retention sweep when `LONGRUN_ARTIFACT_RETENTION_DAYS` is set. A versioned
    worker (LONGRUN_VERSIONING) makes its version current first if it is new."""
    async with (
        activities_for(settings) as activities,
        Worker(
            client,
            task_queue=settings.task_queue,
            workflows=list(workflows),
            activities=activities,
            graceful_shutdown_timeout=timedelta(seconds=settings.worker_shutdown_s),
            max_cached_workflows=settings.max_cached_runs,
            workflow_runner=SHARED_MODULES_SANDBOX,
            deployment_config=deployment_config(settings),
            # Workflow tasks are polled the SDK's way (five at once, four of them on the
            # sticky queue): under load, runs under way go first and new runs wait for their
            # first task, as on bare Temporal. Autoscaling followed the burst of new runs and
            # starved the sticky queue, where the task a decision's signal makes waits: a
            # decision took 12-55x bare Temporal's signal under 50-200 clients, against
            # 1.2x this way (bench/load.py; docs/decisions/0022).
            activity_task_poller_behavior=PollerBehaviorAutoscaling(),
        ) as worker,
    ):
        if settings.versioning:
            log.info("%s", await promote(client, settings))
        sweeper = None
        if settings.artifact_retention_days is not None:
            retention = timedelta(days=settings.artifact_retention_days)
            sweeper = asyncio.create_task(
                _sweep_forever(client, store_for(settings), retention), name="artifact-sweep"
            )
        try:
            yield worker
        finally:
            if sweeper is not None:
                sweeper.cancel()
                with suppress(asyncio.CancelledError):
                    await sweeper


async def sweep_artifacts(client: Client, store: ArtifactStore, retention: timedelta) -> list[str]:
    """Delete the artifacts of runs that ended more than `retention` ago and have written
    none since; the run ids deleted."""
    cutoff = datetime.now(UTC) - retention
    deleted = []
    for run_id in await asyncio.to_thread(store.stale_runs, cutoff):
        if not RUN_ID.match(run_id):
            continue
        try:
            # Temporal, not the artifacts' age, says whether a run is over: a run waiting
            # weeks for an approval still reads its outputs through references.
            if await _ended_before(client, run_id, cutoff):
                await asyncio.to_thread(store.delete_run, run_id)
                deleted.append(run_id)
        except Exception:  # one run's trouble does not hold up the others
            log.exception("artifact retention: could not sweep run %s", run_id)
    return deleted


async def _ended_before(client: Client, run_id: str, cutoff: datetime) -> bool:
    """Whether the run (its latest history segment) closed before `cutoff`; a run Temporal
    no longer knows ended longer ago than Temporal keeps histories."""
    desc = await described(client, run_id)
    if desc is None:
        return True
    return desc.close_time is not None and desc.close_time < cutoff


async def _sweep_forever(client: Client, store: ArtifactStore, retention: timedelta) -> None:
    # Every replica sweeps; that is harmless, because pruning twice deletes nothing more.
    while True:
        try:
            pruned = await sweep_artifacts(client, store, retention)
        except Exception:
            log.exception("artifact retention sweep failed; next try in %s", SWEEP_EVERY)
        else:
            if pruned:
                log.info("artifact retention: deleted the artifacts of %d runs", len(pruned))
        await asyncio.sleep(SWEEP_EVERY.total_seconds())


async def run_worker(settings: Settings, workflows: Sequence[type] = WORKFLOWS) -> None:
    """Poll the task queue until SIGINT or SIGTERM, then finish in-flight work and exit."""
    client = await connect_patiently(settings, log, metrics_runtime(settings))
    await ensure_search_attributes(client)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    found = await asyncio.to_thread(confinement, settings)
    if found.confined:
        log.info("process tools: %s", found.detail)
    else:  # unconfined by choice, or refused: either way someone should know
        log.warning("process tools are %s: %s", found.mode, found.detail)
    freeze_startup_heap()
    async with serving(client, settings, workflows):
        log.info(
            "worker polling task queue %r on %s (namespace %s) as %s",
            settings.task_queue,
            settings.temporal_address,
            settings.temporal_namespace,
            f"version {build_id(settings)}" if settings.versioning else "an unversioned worker",
        )
        problem = await model_problem(settings)
        if problem is not None:
            log.warning("%s", problem)
        await stop.wait()


class ReplayCheck(NamedTuple):
    """What `check_replay` found."""

    replayed: int
    failures: list[str]  # a line for each run that does not replay
    alike: int  # runs not replayed: enough of their version and patch set were


async def check_replay(
    client: Client,
    limit: int,
    where: str | None = None,
    workflows: tuple[type, ...] = WORKFLOWS,
    per_set: int = 10,
) -> ReplayCheck:
    """Replay against this code the histories of the namespace's open runs and of its latest
    ended ones (at most `limit` of each, narrowed by the visibility query `where`), a
    sample of at most `per_set` for each worker version and set of patches their histories
    took, open and ended apart. Before a deploy, a failure here is a run the new code would
    break, named with the event where it diverged. In the default sandbox, stricter than the
    worker's, so a non-deterministic call on a replayed path shows too."""
    replayer = Replayer(
        workflows=list(workflows),
        data_converter=client.data_converter,
        workflow_runner=SandboxedWorkflowRunner(),
    )
    base = f"WorkflowType = '{wire.RUN_WORKFLOW}'" + (f" AND ({where})" if where else "")
    replayed = alike = 0
    failures: list[str] = []
    for status in ("ExecutionStatus = 'Running'", "ExecutionStatus != 'Running'"):
        sampled: Counter[tuple[str | None, frozenset[str]]] = Counter()
        async for found in client.list_workflows(f"{base} AND {status}", limit=limit):
            handle = client.get_workflow_handle(found.id, run_id=found.run_id)
            history = await handle.fetch_history()
            kind = (found.typed_search_attributes.get(VERSION_KEY), patches_in(history))
            if sampled[kind] >= per_set:
                alike += 1
                continue
            sampled[kind] += 1
            result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
            replayed += 1
            if result.replay_failure is not None:
                failures.append(f"{found.id} (execution {found.run_id}): {result.replay_failure}")
    return ReplayCheck(replayed, failures, alike)


async def held_back(client: Client, limit: int, where: str | None = None) -> dict[str, int]:
    """For each registered change, how many of the namespace's open runs (at most `limit`
    looked at, narrowed by the visibility query `where`) started without it: while any
    does, its old branch must stay (see workflows/changes.py); at 0 it can be retired."""
    held = dict.fromkeys(CHANGES, 0)
    query = f"WorkflowType = '{wire.RUN_WORKFLOW}' AND ExecutionStatus = 'Running'"
    query += f" AND ({where})" if where else ""
    async for found in client.list_workflows(query, limit=limit):
        named = set((await found.memo()).get(wire.STARTED_WITH_MEMO) or [])
        for name in CHANGES:
            held[name] += name not in named
    return held


def patches_in(history: WorkflowHistory) -> frozenset[str]:
    """The patches (`workflow.patched`) a history's run took."""
    found = set()
    for event in history.events:
        marker = event.marker_recorded_event_attributes
        if event.HasField("marker_recorded_event_attributes") and marker.marker_name == PATCH:
            for payload in marker.details["patch_data"].payloads:
                found.add(str(json.loads(payload.data).get("id")))
    return frozenset(found)


def main() -> None:
    """Entry point of `python worker.py` and `longrun worker`."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    settings = get_settings()
    configure_tracing("longrun-worker", settings)
    asyncio.run(run_worker(settings))
    exit_without_teardown(0)  # stopped as asked; the SDK may crash a normal exit


if __name__ == "__main__":
    main()
