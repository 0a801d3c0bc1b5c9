"""Deterministic orchestration: the workflows a longrun worker hosts."""

from workflows.run import LABELS_ATTRIBUTE, STATUS_ATTRIBUTE, RunWorkflow

__all__ = ["LABELS_ATTRIBUTE", "STATUS_ATTRIBUTE", "RunWorkflow"]
