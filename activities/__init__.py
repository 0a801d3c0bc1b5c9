"""Everything that touches the world: model calls and tools, as Temporal activities."""

from collections.abc import Callable
from typing import Any

from activities.model import ModelActivities
from activities.tools import REGISTRY, build_tool_activities
from longrun.settings import Settings


def build_activities(settings: Settings) -> list[Callable[..., Any]]:
    """Every activity a longrun worker hosts, bound to `settings`."""
    return [ModelActivities(settings).complete, *build_tool_activities(settings)]


__all__ = ["REGISTRY", "ModelActivities", "build_activities"]
