"""A run's final status, stored once it ends where the API reads it without replaying the
run: the artifact store holds it whole, the memo names it (`final_state`). Without it (runs
from before, a status too big, a store that did not answer, a run ended from outside) the
API asks the `status` query, which replays the run's history."""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows import stored
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    from longrun import wire

FINAL_STATE_PATCH = "final-state"
FINAL_STATE_MAX_BYTES = 1024 * 1024  # one `artifacts.keep` call's batch


async def record_final(parts: RunParts) -> None:
    """Store the status as the run ended and name it in the memo."""
    if not workflow.patched(FINAL_STATE_PATCH):
        return
    state = parts.status.state().model_dump(mode="json")
    if stored.size(state) > FINAL_STATE_MAX_BYTES:
        return
    try:
        kept = await stored.keep(parts.inp.run_id, {"state": state})
    except ActivityError as exc:  # the run has ended all the same; reads replay it
        workflow.logger.warning("final status not stored: %s", exc.cause or exc)
        return
    workflow.upsert_memo({wire.FINAL_STATE_MEMO: kept["state"]["artifact"]})
