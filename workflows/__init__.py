"""Deterministic orchestration: the workflows a longrun worker hosts."""

from workflows.grants import GrantsWorkflow
from workflows.run import RunWorkflow

# What a worker hosts: the runs, and the standing approvals they ask.
WORKFLOWS = (RunWorkflow, GrantsWorkflow)

__all__ = ("WORKFLOWS", "GrantsWorkflow", "RunWorkflow")
