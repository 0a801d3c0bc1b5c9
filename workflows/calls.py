"""How a run calls the world: every tool, model, check and memory activity goes through
here, with its timeouts and retry policy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.common import (
    MODEL_TIMEOUT,
    TOOL_HEARTBEAT_TIMEOUT,
    TOOL_TIMEOUT,
    TOOL_TIMEOUT_MARGIN,
    VERIFY_TIMEOUT,
    StepFailed,
    failure_of,
    retry_policy,
)
from workflows.ledger import CallKind, Ledger

# Model calls heartbeat as they stream, so a dead worker costs this long, not the call's
# whole timeout. Runs started before model calls heartbeated replay without it.
MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=30)
MODEL_HEARTBEAT_PATCH = "model-heartbeat"

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: a method reference and pydantic models, no I/O at import.
    from activities.model import ModelActivities
    from longrun.contracts import ModelRequest, ModelResult, RetrySpec, ToolCall, ToolResult


class Calls:
    """Activities of one run; calls that use the budget pass the ledger's checkpoint."""

    def __init__(self, run_id: str, ledger: Ledger) -> None:
        self.run_id = run_id
        self._ledger = ledger

    async def tool(
        self,
        step_id: str,
        tool: str,
        args: dict[str, Any],
        *,
        retry: RetrySpec | None = None,
        timeout_s: float | None = None,
    ) -> ToolResult:
        """Run `tool.<name>` for a step (after the checkpoint); raises ActivityError when it
        fails for good."""
        call = ToolCall(
            run_id=self.run_id,
            step_id=step_id,
            # Stable across retries and continue-as-new: tools use it to apply an effect once.
            idempotency_key=f"{self.run_id}:{step_id}",
            args=args,
        )
        limit = timedelta(seconds=timeout_s) if timeout_s else TOOL_TIMEOUT
        own = args.get("timeout_s")
        if isinstance(own, int | float):
            # Let the tool's own timeout (non-retryable) fire before Temporal's (retried), so
            # a slow command is stopped once instead of being started again.
            limit = max(limit, timedelta(seconds=own) + TOOL_TIMEOUT_MARGIN)
        result: ToolResult = await workflow.execute_activity(
            f"tool.{tool}",
            call,
            result_type=ToolResult,
            start_to_close_timeout=limit,
            heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
            retry_policy=retry_policy(retry),
            summary=f"step {step_id}: tool {tool}",
        )
        return result

    async def complete(
        self, request: ModelRequest, *, retry: RetrySpec | None, timeout_s: float | None
    ) -> ModelResult:
        """One `model.complete` call of a plan step, with the step's retries and timeout."""
        return await workflow.execute_activity_method(
            ModelActivities.complete,
            request,
            start_to_close_timeout=timedelta(seconds=timeout_s) if timeout_s else MODEL_TIMEOUT,
            heartbeat_timeout=_model_heartbeat(),
            retry_policy=retry_policy(retry),
            summary=f"step {request.step_id}: model {request.model}",
        )

    async def execute(
        self, method: Any, arg: Any, *, summary: str, limit: timedelta = MODEL_TIMEOUT
    ) -> Any:
        """Run a model, check or memory activity with the default retries (after the
        checkpoint where it uses the budget)."""
        return await workflow.execute_activity_method(
            method,
            arg,
            start_to_close_timeout=limit,
            # Checks may run tools, which heartbeat often; model calls as they stream.
            heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT
            if limit is VERIFY_TIMEOUT
            else _model_heartbeat(),
            retry_policy=retry_policy(None),
            summary=summary,
        )

    async def checked(
        self,
        method: Any,
        arg: Any,
        *,
        summary: str,
        limit: timedelta = MODEL_TIMEOUT,
        kind: CallKind = "model",
    ) -> Any:
        """Pass the checkpoint, then run the activity; a failure retries cannot fix fails
        the run."""
        await self._ledger.checkpoint(kind)
        try:
            return await self.execute(method, arg, summary=summary, limit=limit)
        except ActivityError as exc:
            message, _ = failure_of(exc)
            raise StepFailed(f"{summary} failed: {message}") from None


def _model_heartbeat() -> timedelta | None:
    return MODEL_HEARTBEAT_TIMEOUT if workflow.patched(MODEL_HEARTBEAT_PATCH) else None
