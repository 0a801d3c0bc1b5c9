"""Deterministic orchestration: the workflows a longrun worker hosts."""

from workflows.run import RunWorkflow
from workflows.status import LABELS_ATTRIBUTE, STATUS_ATTRIBUTE

__all__ = ["LABELS_ATTRIBUTE", "STATUS_ATTRIBUTE", "RunWorkflow"]
