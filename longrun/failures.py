"""Failures a Temporal activity reports, as what runs code shared with the API raises them:
one no retry can fix, and one worth retrying."""

from __future__ import annotations

from datetime import timedelta

from temporalio.exceptions import ApplicationError


def fatal(message: str, *, type: str = "Fatal") -> ApplicationError:
    """An error a retry cannot fix; the message should tell a person what to change."""
    return ApplicationError(message, type=type, non_retryable=True)


def transient(message: str, *, retry_after_s: float | None = None) -> ApplicationError:
    """An error worth retrying; `retry_after_s` overrides the retry policy's next delay."""
    delay = timedelta(seconds=retry_after_s) if retry_after_s else None
    return ApplicationError(message, type="Transient", next_retry_delay=delay)
