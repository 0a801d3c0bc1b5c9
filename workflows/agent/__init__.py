"""The agent loop of goal-only runs, in parts: state, briefs, acting, checks, memory."""

from workflows.agent.briefs import describe_criterion, tool_schema
from workflows.agent.loop import AgentLoop

__all__ = ("AgentLoop", "describe_criterion", "tool_schema")
