"""A run's final record, stored once it ends where the API reads it without replaying the
run: its status, its audit trail and its steps as the queries would answer them, whole in
the artifact store, named in the memo (`final_record`). Without it (runs from before, a
store that did not answer, a run ended from outside), or without the part asked for (left
out to fit), the API asks the run's query, which replays its history."""

from __future__ import annotations

from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows import stored
from workflows.changes import baseline_retired
from workflows.common import retry_policy
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    from longrun import wire
    from longrun.contracts import AuditTrail, KeepRequest

FINAL_RECORD_MAX_BYTES = 1024 * 1024  # as one `artifacts.keep` call's batch


async def record_final(parts: RunParts, memo: dict[str, Any]) -> None:
    """Store the run as it ended and name the record in the memo, in one upsert with
    `memo` (what else the memo is to hold as the run ends)."""
    baseline_retired()
    kept = await _keep(parts)
    if kept is not None:
        memo = {**memo, wire.FINAL_RECORD_MEMO: kept}
    if memo:
        workflow.upsert_memo(memo)


async def _keep(parts: RunParts) -> str | None:
    """Store the run's final record; its artifact reference (None: nothing stored)."""
    record = _record(parts)
    if record is None:
        return None
    try:
        # A local activity: its input (the record) stays out of history, only the reference
        # it returns is recorded.
        kept: dict[str, Any] = await workflow.execute_local_activity(
            "artifacts.keep",
            KeepRequest(run_id=parts.inp.run_id, outputs={"record": record}),
            result_type=dict,
            start_to_close_timeout=stored.KEEP_TIMEOUT,
            retry_policy=retry_policy(None),
            summary="keep the run's final record in the artifact store",
        )
    except ActivityError as exc:  # the run has ended all the same; reads replay it
        workflow.logger.warning("final record not stored: %s", exc.cause or exc)
        return None
    reference: str = kept["record"]["artifact"]
    return reference


def _record(parts: RunParts) -> dict[str, Any] | None:
    """Status, audit, steps and events; the events left out if the whole does not fit one
    call, then the steps, then the audit; None if the status alone does not."""
    audit = parts.audit
    trail = AuditTrail(run_id=parts.inp.run_id, entries=audit.entries, archived=audit.archived)
    record: dict[str, Any] = {
        "status": parts.status.state().model_dump(mode="json"),
        "audit": trail.model_dump(mode="json"),
        "steps": {k: s.model_dump(mode="json") for k, s in parts.steps.by_id.items()},
        "events": parts.events.whole().model_dump(mode="json"),
    }
    for left_out in ("events", "steps", "audit"):
        if stored.size(record) <= FINAL_RECORD_MAX_BYTES:
            return record
        del record[left_out]
    return record if stored.size(record) <= FINAL_RECORD_MAX_BYTES else None
