"""longrun: durable runs for long AI agent jobs, on Temporal. Shared contracts and settings."""

from longrun.contracts import Plan, RunRequest, RunState, Step
from longrun.settings import Settings, get_settings

__all__ = ["Plan", "RunRequest", "RunState", "Settings", "Step", "get_settings"]
