"""Which MCP tools a submitted run gets: the API lists the configured servers' tools (the
hub caches them) when a request names one, and the run keeps what it was checked against."""

from __future__ import annotations

from fastapi import HTTPException

from activities.mcp import McpHub
from longrun.contracts import McpTool, Plan, RunRequest
from longrun.mcp_servers import split_name
from longrun.policy import Policy


def _named(body: RunRequest) -> list[str] | None:
    """The tools a request names; None for an agent given no list (it gets every tool)."""
    if body.plan is not None:
        return plan_tools(body.plan)
    return body.tools


def plan_tools(plan: Plan) -> list[str] | None:
    """The tools a plan's steps call, its child runs' included; None if a goal-only child
    run is given no list (it gets every tool)."""
    names: list[str] = []
    for step in plan.steps:
        each = step.for_each
        tool = each.tool if each is not None else step.tool
        if tool is not None:
            names.append(tool)
        spec = step.run or (each.run if each is not None else None)
        if spec is None:
            continue
        inner = plan_tools(spec.plan) if spec.plan is not None else spec.tools
        if inner is None:
            return None
        names += inner
    return names


async def mcp_tools_for(names: list[str] | None, hub: McpHub, policy: Policy) -> list[McpTool]:
    """The MCP tools `names` asks for (every one the policy allows when None), as the
    servers list them now. A server a request names that cannot be listed is a 503; with
    no names, its tools are left out."""
    if names is None:
        tools, _ = await hub.tools()
        return [t for t in tools if policy.allows(t.name)]
    servers = sorted({parts[0] for n in names if (parts := split_name(n)) is not None})
    if not servers:
        return []
    tools, problems = await hub.tools(servers)
    if problems:
        raise HTTPException(503, "; ".join(problems), headers={"Retry-After": "5"})
    wanted = set(names)
    return [t for t in tools if t.name in wanted]


async def request_mcp_tools(body: RunRequest, hub: McpHub, policy: Policy) -> list[McpTool]:
    """The MCP tools a run request may use."""
    return await mcp_tools_for(_named(body), hub, policy)
