"""The tools one run may use: the built-in registry, plus the MCP tools it was submitted
with. Both kinds answer the same questions (arguments valid? side effect? schema? undo?),
so plans, agents and compensation treat them alike."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from activities.tools.registry import REGISTRY, ToolSpec
from longrun.contracts import McpTool, SideEffect

Loc = tuple[str | int, ...]
MAX_ERRORS = 20


@dataclass(frozen=True)
class McpToolSpec:
    """An MCP server's tool as a run knows it (`McpTool`), with a built-in's interface."""

    tool: McpTool
    exposes_secrets: bool = False
    quick: bool = False  # a call goes to a server: never a local activity

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    def side_effect_for(self, args: dict[str, Any]) -> SideEffect:
        return self.tool.side_effect

    def args_errors(self, args: dict[str, Any]) -> list[tuple[Loc, str]]:
        try:
            validator = Draft202012Validator(self.tool.input_schema)
            errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        except (SchemaError, RecursionError) as exc:  # the server's schema, not the caller's
            return [((), f"{self.name} has an input schema longrun cannot check: {exc}")]
        return [(tuple(e.absolute_path), e.message[:500]) for e in errors[:MAX_ERRORS]]

    def parameters(self) -> dict[str, Any]:
        return self.tool.input_schema

    def undo(self, args: dict[str, Any], output: dict[str, Any]) -> None:
        """No MCP call has a known undo."""
        return None


AnyTool = ToolSpec | McpToolSpec


def toolbox(mcp_tools: Iterable[McpTool]) -> Mapping[str, AnyTool]:
    """Every tool a run with these MCP tools may name."""
    mcp: dict[str, AnyTool] = {t.name: McpToolSpec(t) for t in mcp_tools}
    builtin: dict[str, AnyTool] = dict(REGISTRY)
    return ChainMap(mcp, builtin)
