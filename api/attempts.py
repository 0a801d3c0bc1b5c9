"""A live run's calls that are being retried, read from the pending activities Temporal
describes: the workflow itself learns of an attempt only when its call ends."""

from __future__ import annotations

import re
from datetime import UTC

from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowExecutionDescription

from api.schemas import RetryingCall, RunDetail

# Activity ids of runs are "<summary> #<n>" (workflows.calls); a step's summary names it.
_CALL = re.compile(r"^(?P<call>.+) #\d+$")
_STEP = re.compile(r"^step (?P<step>[a-z0-9_-]+): ")


def show_retries(detail: RunDetail, desc: WorkflowExecutionDescription) -> None:
    """List the calls that failed at least once and are tried again, and show the attempt
    and last error on their steps."""
    steps = {s.id: s for s in detail.steps if s.status == "running"}
    for pending in desc.raw_description.pending_activities:
        named = _CALL.match(pending.activity_id)
        failed = pending.HasField("last_failure")
        if named is None or (pending.attempt <= 1 and not failed):
            continue
        error = _message(pending.last_failure) if failed else None
        next_at = None
        if pending.HasField("next_attempt_schedule_time"):
            next_at = pending.next_attempt_schedule_time.ToDatetime(tzinfo=UTC)
        call = RetryingCall(
            call=named["call"], attempt=pending.attempt, last_error=error, next_attempt_at=next_at
        )
        detail.retrying.append(call)
        step = _STEP.match(call.call)
        if step is not None and step["step"] in steps:
            steps[step["step"]].attempts = pending.attempt
            steps[step["step"]].error = error


def _message(failure: Failure) -> str:
    """A failure's message; for a timed-out attempt, with the failure it timed out after."""
    if failure.HasField("timeout_failure_info") and failure.HasField("cause"):
        return f"{failure.message}: {failure.cause.message}"
    return failure.message
