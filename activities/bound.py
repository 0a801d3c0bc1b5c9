"""What a worker hosts: every activity, bound to its settings (imported by the worker
only, so the API does not load the model client)."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from activities.mcp import McpHub, build_mcp_activity
from activities.model import ModelActivities
from activities.oversized import KeepActivities
from activities.tools.bound import build_tool_activities
from activities.verify import VerifyActivities
from activities.webhooks import WebhookActivities
from longrun.settings import Settings


@asynccontextmanager
async def activities_for(settings: Settings) -> AsyncIterator[list[Callable[..., Any]]]:
    """Every activity a longrun worker hosts, bound to `settings`; closes clients on exit."""
    model = ModelActivities(settings)
    verify = VerifyActivities(settings, model)
    keep = KeepActivities(settings)
    webhooks = WebhookActivities(settings)
    mcp = McpHub.of(settings)
    try:
        yield [
            model.complete,
            model.plan,
            model.act,
            model.compact,
            verify.step,
            verify.acceptance,
            keep.keep,
            webhooks.deliver,
            *build_tool_activities(settings),
            build_mcp_activity(mcp, settings),
        ]
    finally:
        await model.aclose()
        await mcp.aclose()
