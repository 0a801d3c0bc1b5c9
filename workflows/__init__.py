"""Deterministic orchestration: the workflows a longrun worker hosts."""

from workflows.run import RunWorkflow

__all__ = ("RunWorkflow",)
