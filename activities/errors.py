"""How activity failures are reported to the workflow."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory

from longrun.failures import fatal, transient

__all__ = [
    "fatal",
    "recovering_s",
    "reported_with_attempt",
    "retry_after_seconds",
    "transient",
]

log = logging.getLogger("longrun.activity")


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header in seconds (the HTTP-date form is not honoured)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def recovering_s() -> float:
    """Seconds the running activity waited before this attempt began: earlier attempts lost
    (a worker that died, a server that could not be reached), their backoff and the wait
    for a worker; both times are the server's."""
    if not activity.in_activity() or activity.info().is_local:
        return 0.0
    info = activity.info()
    return round(max(0.0, (info.started_time - info.scheduled_time).total_seconds()), 3)


@contextmanager
def reported_with_attempt() -> Iterator[int]:
    """Re-raise any failure as an ApplicationError carrying the attempt number in its details.

    The workflow cannot see attempt counts of a failed activity otherwise; step status
    shows them. A failure that will be retried is logged here in one line and goes to
    history as its message and type only (the SDK would log and store a traceback of
    every attempt). Cancellation is a BaseException and passes through untouched.
    """
    info = activity.info()
    attempt = info.attempt
    try:
        yield attempt
    except ApplicationError as exc:
        retried = not exc.non_retryable
        if retried:
            log.warning(
                "%s attempt %d failed, retrying: %s", info.activity_type, attempt, exc.message
            )
        raise ApplicationError(
            exc.message,
            {"attempt": attempt},
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
            # Benign: the SDK logs it at debug level instead of with a traceback.
            category=ApplicationErrorCategory.BENIGN if retried else exc.category,
        ) from None
    except ValidationError as exc:
        raise ApplicationError(
            f"invalid arguments: {exc}",
            {"attempt": attempt},
            type="InvalidArgs",
            non_retryable=True,
        ) from exc
    except Exception as exc:
        raise ApplicationError(
            f"{type(exc).__name__}: {exc}", {"attempt": attempt}, type=type(exc).__name__
        ) from exc
