"""The tools at work: one activity per tool of the catalogue, bound to a worker's settings,
and `call_redacted`, through which every call of a tool runs (the activity, a check, the
eval's plain loop); importing this module implements the built-in tools.

Each activity is named `tool.<name>`, validates its arguments against the tool's model,
runs in the run's workspace and heartbeats while it works, so cancellation reaches it and
a dead worker is noticed within the heartbeat timeout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.errors import fatal, reported_with_attempt
from activities.heartbeat import heartbeating
from activities.tools import builtin, notes
from activities.tools.registry import IMPLEMENTATIONS, ToolContext, redact, workspace_of
from longrun.artifacts import store_for
from longrun.catalogue import CATALOGUE, ToolSpec
from longrun.contracts import ToolCall, ToolResult
from longrun.policy import forbidding
from longrun.settings import Settings

IMPLEMENTED_HERE = (builtin, notes)  # the built-in tools' implementations


async def call_redacted(spec: ToolSpec, args: Any, ctx: ToolContext) -> dict[str, Any]:
    """Run a tool; no secret it used leaves in its output or in a failure of any type (an
    unexpected exception becomes an ApplicationError of the same type name, without the
    cause whose traceback and arguments could hold the secret)."""
    try:
        output = await IMPLEMENTATIONS[spec.name](args, ctx)
    except ApplicationError as exc:
        if not ctx.revealed:
            raise
        raise ApplicationError(
            redact(exc.message, ctx.revealed),
            type=exc.type,
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
        ) from None
    except Exception as exc:
        if not ctx.revealed:
            raise
        message = redact(f"{type(exc).__name__}: {exc}", ctx.revealed)
        raise ApplicationError(message, type=type(exc).__name__) from None
    redacted: dict[str, Any] = redact(output, ctx.revealed)
    return redacted


def build_tool_activities(settings: Settings) -> list[Callable[..., Any]]:
    """One activity per tool of the catalogue, bound to this worker's settings; a worker
    that cannot run one of them does not start."""
    missing = sorted(set(CATALOGUE) - set(IMPLEMENTATIONS))
    if missing:
        raise RuntimeError(f"tools declared but not implemented: {', '.join(missing)}")

    store = store_for(settings)
    threshold = settings.artifact_threshold_bytes

    def bind(spec: ToolSpec) -> Callable[..., Any]:
        async def run_tool(call: ToolCall) -> ToolResult:
            with reported_with_attempt() as attempt:
                refusal = forbidding(settings.policy_file, spec.name)
                if refusal is not None:
                    raise fatal(refusal, type="ToolForbidden")
                # First, so that every attempt but one that lost it finds it (see there).
                workspace = workspace_of(settings, call.run_id, attempt, call.workspace_used)
                # References to big outputs of earlier steps become their content again.
                raw = await store.expanded(call.run_id, call.args)
                args = spec.args_model.model_validate(raw)
                ctx = ToolContext(
                    run_id=call.run_id,
                    step_id=call.step_id,
                    idempotency_key=call.idempotency_key,
                    workspace=workspace,
                    settings=settings,
                    grant=call.grant,
                )
                async with heartbeating():
                    output = await call_redacted(spec, args, ctx)
                # Big outputs go to the artifact store; history keeps a reference.
                output = await store.offloaded(call.run_id, output, threshold)
            local = activity.info().is_local  # its input is not in history: keep it
            return ToolResult(output=output, attempt=attempt, call=call if local else None)

        run_tool.__doc__ = spec.description
        return activity.defn(name=spec.activity_name)(run_tool)

    return [bind(spec) for spec in CATALOGUE.values()]
