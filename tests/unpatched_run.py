"""The run workflow with a command added before its first one, unpatched: what a careless
change to workflow code looks like. In a module of its own, which the workflow sandbox
imports afresh (test modules import what it forbids)."""

from __future__ import annotations

from temporalio import workflow

from longrun import wire
from longrun.contracts import RunInput, RunResult
from workflows import RunWorkflow


@workflow.defn(name=wire.RUN_WORKFLOW)
class TimerFirstRun(RunWorkflow):
    """Sleeps before the run's own first command."""

    @workflow.run
    async def run(self, inp: RunInput) -> RunResult:
        """A timer, then the run as it is."""
        await workflow.sleep(0.01)
        return await super().run(inp)
