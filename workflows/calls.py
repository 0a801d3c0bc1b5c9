"""How a run calls the world: every tool, model, check and memory activity goes through
here, with its timeouts and retry policy."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, RetryState
from temporalio.workflow import ActivityCancellationType

from workflows import stored
from workflows.changes import baseline_retired, changed
from workflows.common import (
    MAX_RETRY_INTERVAL,
    MODEL_TIMEOUT,
    TOOL_HEARTBEAT_TIMEOUT,
    TOOL_TIMEOUT,
    TOOL_TIMEOUT_MARGIN,
    VERIFY_TIMEOUT,
    StepFailed,
    failure_of,
    retry_policy,
)
from workflows.counterfactual import Counterfactual
from workflows.ledger import CallKind, Ledger

# Model calls heartbeat as they stream, so a dead worker costs this long, not the call's
# whole timeout; and they retry transient failures for a window of time rather than a
# count, so a model server's restart does not fail a run.
MODEL_HEARTBEAT_TIMEOUT = timedelta(seconds=20)
ACTIVITY_ID_CHARS = 200
# A call's arguments (or a model step's prompt) beyond this are stored whole and travel
# as references, which the activity reads back.
CALL_MAX_BYTES = 256 * 1024
# A quick tool (short, read-only, safe to run again) runs as a local activity: in the worker
# task that asked for it, with no task-queue round trip and no activity events, its result
# kept in a marker. A worker lost mid-call costs the workflow task's timeout and the call
# runs again. The limit of such a call when its step sets none.
QUICK_TOOL_TIMEOUT = timedelta(seconds=30)

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: a method reference and pydantic models, no I/O at import.
    from activities.model import ModelActivities
    from longrun import refs
    from longrun.catalogue import AnyTool
    from longrun.contracts import (
        ModelRequest,
        ModelResult,
        RetrySpec,
        SecretGrant,
        ToolCall,
        ToolResult,
    )
    from longrun.mcp_servers import PREFIX as MCP_PREFIX


class Calls:
    """Activities of one run; calls that use the budget pass the ledger's checkpoint."""

    def __init__(
        self,
        run_id: str,
        ledger: Ledger,
        model_retry_window: timedelta,
        grant: SecretGrant,
        counterfactual: Counterfactual,
        tools: Mapping[str, AnyTool],
    ) -> None:
        self.run_id = run_id
        # A counterfactual fork's recorded calls, answered instead of run.
        self.counterfactual = counterfactual
        # Every tool call and check carries it: the activity checks a secret against it.
        self.grant = grant
        # Whether a tool call of this run completed in its workspace (carried on).
        self.workspace_used = False
        self._ledger = ledger
        self._window = model_retry_window
        self._scheduled = 0
        self._quick = {name for name, spec in tools.items() if spec.quick}

    def _id(self, summary: str) -> str:
        """The activity id of a call with this summary, unique in the execution."""
        baseline_retired()
        self._scheduled += 1
        return f"{summary[:ACTIVITY_ID_CHARS]} #{self._scheduled}"

    async def tool(
        self,
        step_id: str,
        tool: str,
        args: dict[str, Any],
        *,
        retry: RetrySpec | None = None,
        timeout_s: float | None = None,
        run_id: str | None = None,
    ) -> ToolResult:
        """Run `tool.<name>` for a step (after the checkpoint); raises ActivityError when it
        fails for good. With `run_id`, in that (child) run's workspace: an undo of its call.
        A call the run replays is answered from its recording instead (`replayed`)."""
        if run_id is None:
            replayed = self.counterfactual.answer(step_id, tool, args)
            if replayed is not None:
                return replayed
        args = await self._bounded(args)
        run_id = run_id or self.run_id
        call = ToolCall(
            run_id=run_id,
            step_id=step_id,
            # Stable across retries and continue-as-new: tools use it to apply an effect once.
            idempotency_key=f"{run_id}:{step_id}",
            args=args,
            grant=self.grant,
            workspace_used=self.workspace_used and run_id == self.run_id,
        )
        summary = f"step {step_id}: tool {tool}"
        result: ToolResult
        if tool in self._quick and changed("quick-tools-local"):
            result = await self._quick_tool(tool, call, summary, retry, timeout_s)
        else:
            result = await workflow.execute_activity(
                f"tool.{tool}",
                call,
                result_type=ToolResult,
                start_to_close_timeout=self._limit(args, timeout_s),
                heartbeat_timeout=TOOL_HEARTBEAT_TIMEOUT,
                retry_policy=retry_policy(retry),
                summary=summary,
                activity_id=self._id(summary),
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        if run_id == self.run_id and not tool.startswith(MCP_PREFIX):
            self.workspace_used = True  # a built-in tool ran in it
        return result

    async def _quick_tool(
        self,
        tool: str,
        call: ToolCall,
        summary: str,
        retry: RetrySpec | None,
        timeout_s: float | None,
    ) -> ToolResult:
        """A quick tool's call as a local activity; fails as a task-queue one would."""
        activity_id = self._id(summary)
        try:
            result: ToolResult = await workflow.execute_local_activity(
                f"tool.{tool}",
                call,
                result_type=ToolResult,
                start_to_close_timeout=timedelta(seconds=timeout_s)
                if timeout_s
                else QUICK_TOOL_TIMEOUT,
                retry_policy=retry_policy(retry),
                summary=summary,
                activity_id=activity_id,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            )
        except ApplicationError as exc:
            # The SDK raises a local activity's last failure bare, not in an ActivityError
            # (its timeouts come wrapped): wrap it, so every caller handles one kind.
            raise ActivityError(
                f"tool.{tool} failed",
                scheduled_event_id=0,
                started_event_id=0,
                identity="",
                activity_type=f"tool.{tool}",
                activity_id=activity_id or "",
                retry_state=RetryState.NON_RETRYABLE_FAILURE
                if exc.non_retryable
                else RetryState.MAXIMUM_ATTEMPTS_REACHED,
            ) from exc
        return result

    @staticmethod
    def _limit(args: dict[str, Any], timeout_s: float | None) -> timedelta:
        """How long one attempt of a tool call may take."""
        limit = timedelta(seconds=timeout_s) if timeout_s else TOOL_TIMEOUT
        own = args.get("timeout_s")
        if isinstance(own, int | float):
            # Let the tool's own timeout (non-retryable) fire before Temporal's (retried), so
            # a slow command is stopped once instead of being started again.
            limit = max(limit, timedelta(seconds=own) + TOOL_TIMEOUT_MARGIN)
        return limit

    async def complete(
        self, request: ModelRequest, *, retry: RetrySpec | None, timeout_s: float | None
    ) -> ModelResult:
        """One `model.complete` call of a plan step, with the step's retries (or the retry
        window) and timeout."""
        texts = await self._bounded({"prompt": request.prompt, "system": request.system})
        if texts["prompt"] is not request.prompt or texts["system"] is not request.system:
            written = {k: refs.marker(v) if refs.is_ref(v) else v for k, v in texts.items()}
            request = request.model_copy(update=written)
        result: ModelResult = await self._model(
            ModelActivities.complete,
            request,
            limit=timedelta(seconds=timeout_s) if timeout_s else MODEL_TIMEOUT,
            retry=retry,
            summary=f"step {request.step_id}: model {request.model}",
        )
        return result

    async def _bounded(self, values: dict[str, Any]) -> dict[str, Any]:
        """`values` within CALL_MAX_BYTES: the biggest stored whole, as references."""
        if stored.size(values) <= CALL_MAX_BYTES:
            return values
        baseline_retired()
        return await stored.fit(self.run_id, values, CALL_MAX_BYTES)

    async def execute(
        self, method: Any, arg: Any, *, summary: str, limit: timedelta = MODEL_TIMEOUT
    ) -> Any:
        """Run a model or check activity (after the checkpoint where it uses the budget):
        checks ask the judge model, so they outlast a model outage as model calls do."""
        if limit is VERIFY_TIMEOUT:
            baseline_retired()
        return await self._model(method, arg, limit=limit, retry=None, summary=summary)

    async def _model(
        self, method: Any, arg: Any, *, limit: timedelta, retry: RetrySpec | None, summary: str
    ) -> Any:
        """A model activity; when its retry window runs out, the run waits for a person to
        resume it and then asks again."""
        while True:
            try:
                return await workflow.execute_activity_method(
                    method,
                    arg,
                    start_to_close_timeout=limit,
                    **self._model_options(retry),
                    summary=summary,
                    activity_id=self._id(summary),
                )
            except ActivityError as exc:
                windowed = retry is None and exc.retry_state == RetryState.TIMEOUT
                if not windowed:
                    raise
                baseline_retired()
                message, _ = failure_of(exc)
                await self._ledger.wait_for_model(f"{summary}: {message}")

    def _model_options(self, retry: RetrySpec | None) -> dict[str, Any]:
        """Heartbeat timeout and retries of a model call: a window of time, unless the
        step sets its own retries."""
        baseline_retired()
        if retry is not None:
            return {
                "heartbeat_timeout": MODEL_HEARTBEAT_TIMEOUT,
                "retry_policy": retry_policy(retry),
            }
        return {
            "heartbeat_timeout": MODEL_HEARTBEAT_TIMEOUT,
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(seconds=1),
                backoff_coefficient=2.0,
                maximum_interval=MAX_RETRY_INTERVAL,
                maximum_attempts=0,  # bounded by the window instead
            ),
            "schedule_to_close_timeout": self._window,
        }

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
