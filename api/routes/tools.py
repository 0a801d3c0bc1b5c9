"""The tool catalogue: what plans and agents may call, with each tool's arguments."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.access import Reader
from api.deps import McpHubDep, PolicyDep, SettingsDep
from api.routes.health import process_tools
from api.schemas import ProcessTools, answers
from longrun.catalogue import CATALOGUE
from longrun.contracts import SideEffect

router = APIRouter(prefix="/v1/tools", tags=["tools"], responses=answers(401, 403))


class ToolInfo(BaseModel):
    """One tool a step may name."""

    name: str
    description: str
    side_effect: SideEffect | None = Field(
        description="read_only, reversible or irreversible; null when it depends on the "
        "arguments (http_request: by method)"
    )
    reversible: bool = Field(description="compensation can undo a call")
    allowed: bool = Field(description="this server's policy allows it")
    args_schema: dict[str, Any] = Field(description="JSON Schema of `args`")


class ToolList(BaseModel):
    """Every tool this server knows."""

    tools: list[ToolInfo]
    unavailable: list[str] = Field(
        default_factory=list, description="MCP servers whose tools could not be listed, and why"
    )
    process_tools: ProcessTools = Field(
        description="how shell, python and check commands run: confined or not, and why"
    )


@router.get("")
async def list_tools(
    policy: PolicyDep, hub: McpHubDep, settings: SettingsDep, caller: Reader
) -> ToolList:
    """Every tool with its description, side-effect class and argument schema: the
    built-in ones, and those of the configured MCP servers (`mcp.<server>.<tool>`) that
    can be listed now; `unavailable` says why the others cannot."""
    builtin = [
        ToolInfo(
            name=spec.name,
            description=spec.description,
            side_effect=spec.side_effect if isinstance(spec.side_effect, SideEffect) else None,
            reversible=spec.compensation is not None,
            allowed=policy.allows(spec.name),
            args_schema=spec.parameters(),
        )
        for spec in CATALOGUE.values()
    ]
    found, problems = await hub.tools()
    mcp = [
        ToolInfo(
            name=t.name,
            description=t.description,
            side_effect=t.side_effect,
            reversible=False,
            allowed=policy.allows(t.name),
            args_schema=t.input_schema,
        )
        for t in found
    ]
    return ToolList(
        tools=sorted(builtin + mcp, key=lambda t: t.name),
        unavailable=problems,
        process_tools=await process_tools(settings),
    )
