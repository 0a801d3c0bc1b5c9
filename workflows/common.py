"""What the run workflow and its agent loop share: timeouts, retry policies, failures."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as TemporalTimeout

from workflows.changes import baseline_retired

with workflow.unsafe.imports_passed_through():
    from longrun.attributes import STATUS_ATTRIBUTE
    from longrun.contracts import RetrySpec
    from longrun.policy import Policy

TOOL_TIMEOUT = timedelta(minutes=10)
TOOL_TIMEOUT_MARGIN = timedelta(seconds=30)
TOOL_HEARTBEAT_TIMEOUT = timedelta(seconds=10)
MODEL_TIMEOUT = timedelta(minutes=5)
VERIFY_TIMEOUT = timedelta(minutes=10)
MAX_RETRY_INTERVAL = timedelta(minutes=1)
PREVIEW_CHARS = 500
TIMEOUT_ACTOR = "timeout"  # who decides an approval nobody decided in time

# The run's parts read time through a clock: `workflow.now` in a run, a fake one in tests.
Clock = Callable[[], datetime]


class StepFailed(Exception):
    """A step ended in failure; the run fails with this message (and first undoes its
    completed steps when `compensate`)."""

    def __init__(self, message: str, *, compensate: bool = False) -> None:
        super().__init__(message)
        self.compensate = compensate


def searchable() -> bool:
    """Whether this run was started with longrun's search attributes (by the API, a
    schedule or its parent); one started without them (the time-skipping test server
    cannot register custom attributes) publishes none, and starts its children without."""
    return workflow.info().typed_search_attributes.get(STATUS_ATTRIBUTE) is not None


def retry_policy(spec: RetrySpec | None) -> RetryPolicy:
    """Temporal's retry policy for a step's retry settings (or the defaults)."""
    spec = spec or RetrySpec()
    return RetryPolicy(
        maximum_attempts=spec.max_attempts,
        initial_interval=timedelta(seconds=spec.initial_interval_s),
        backoff_coefficient=spec.backoff,
        maximum_interval=max(MAX_RETRY_INTERVAL, timedelta(seconds=spec.initial_interval_s)),
    )


def cut(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and an ellipsis."""
    return text if len(text) <= limit else text[:limit] + "…"


def preview(value: Any) -> str:
    """A short one-line rendering of a value, for summaries."""
    return cut(
        value if isinstance(value, str) else json.dumps(value, sort_keys=True), PREVIEW_CHARS
    )


def failure_of(exc: ActivityError) -> tuple[str, int]:
    """The person-readable message and attempt count of a failed activity; a cancelled
    activity re-raises the workflow's cancellation."""
    if isinstance(exc.cause, CancelledError):
        raise asyncio.CancelledError from None
    cause = exc.cause
    if isinstance(cause, TemporalTimeout) and isinstance(cause.cause, ApplicationError):
        cause = cause.cause  # a window that ran out: the last attempt's failure says why
    if isinstance(cause, ApplicationError):
        attempt = 0
        if cause.details and isinstance(cause.details[0], dict):
            attempt = int(cause.details[0].get("attempt", 0))
        return cause.message, attempt
    if cause is not None:
        return str(cause) or type(cause).__name__, 0
    return str(exc), 0


def version() -> str | None:
    """The build id of the worker version this workflow task runs on (None: unversioned)."""
    found = workflow.info().get_current_deployment_version()
    return found.build_id if found is not None else None


def secret_approval(policy: Policy, tool: str, args: dict[str, Any]) -> str | None:
    """Why a call that hands secrets to a command needs approval (see longrun.policy)."""
    why = policy.secret_approval(tool, args)
    if why:
        baseline_retired()
    return why
