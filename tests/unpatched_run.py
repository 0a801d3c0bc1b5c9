"""The run workflow with a command added before its first one, unpatched: what a careless
change to workflow code looks like. In a module of its own, which the workflow sandbox
imports afresh (test modules import what it forbids)."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import VersioningBehavior

from workflows import RunWorkflow

with workflow.unsafe.imports_passed_through():  # the classes the run workflow itself uses
    from longrun import wire
    from longrun.contracts import RunInput, RunResult


@workflow.defn(name=wire.RUN_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class TimerFirstRun(RunWorkflow):
    """Sleeps before the run's own first command."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        """A timer, then the run as it is."""
        await workflow.sleep(0.01)
        return await super().run(inp)


@workflow.defn(name=wire.RUN_WORKFLOW, versioning_behavior=VersioningBehavior.PINNED)
class PatchedTimerFirstRun(RunWorkflow):
    """The same change done right: behind `workflow.patched()`."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        """A timer for runs started with the change, then the run as it is."""
        if workflow.patched("timer-first"):
            await workflow.sleep(0.01)
        return await super().run(inp)


def main() -> None:
    """A worker process running TimerFirstRun: version 2 of a deploy that breaks replay."""
    import asyncio
    import logging

    import worker
    from longrun.settings import get_settings

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    asyncio.run(worker.run_worker(get_settings(), workflows=(TimerFirstRun,)))


if __name__ == "__main__":
    main()
