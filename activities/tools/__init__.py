"""The tools at work; importing this package implements the catalogue's built-in ones."""

from activities.tools import builtin as _builtin  # noqa: F401  (implements the built-in tools)
from activities.tools import notes as _notes  # noqa: F401  (implements `note`)
from activities.tools.registry import IMPLEMENTATIONS, ToolContext, build_tool_activities, tool

__all__ = ["IMPLEMENTATIONS", "ToolContext", "build_tool_activities", "tool"]
