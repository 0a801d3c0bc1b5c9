"""Tools a run may call; importing this package registers the built-in ones."""

from activities.tools import builtin as _builtin  # noqa: F401  (registers the built-in tools)
from activities.tools import notes as _notes  # noqa: F401  (registers `note`)
from activities.tools.registry import REGISTRY, ToolContext, ToolSpec, build_tool_activities, tool

__all__ = ["REGISTRY", "ToolContext", "ToolSpec", "build_tool_activities", "tool"]
