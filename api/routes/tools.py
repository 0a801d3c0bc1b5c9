"""The tool catalogue: what plans and agents may call, with each tool's arguments."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from activities.tools import REGISTRY
from api.auth import Reader
from api.deps import PolicyDep
from api.schemas import answers
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


@router.get("")
async def list_tools(policy: PolicyDep, caller: Reader) -> ToolList:
    """Every tool with its description, side-effect class and argument schema."""
    return ToolList(
        tools=[
            ToolInfo(
                name=spec.name,
                description=spec.description,
                side_effect=spec.side_effect if isinstance(spec.side_effect, SideEffect) else None,
                reversible=spec.compensation is not None,
                allowed=policy.allows(spec.name),
                args_schema=spec.args_model.model_json_schema(),
            )
            for spec in sorted(REGISTRY.values(), key=lambda s: s.name)
        ]
    )
