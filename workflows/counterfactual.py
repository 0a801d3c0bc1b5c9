"""A counterfactual fork's tool calls: a call with the same tool and arguments as a call of
the run it forks is answered from that call's recorded output, and nothing runs. Which
calls match is fixed by the run's input, so replay stays deterministic."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow

from workflows.audit import AuditLog

with workflow.unsafe.imports_passed_through():
    from longrun.contracts import RecordedCall, Reuse, ToolResult


def call_key(tool: str, args: dict[str, Any]) -> str:
    """What makes two calls the same: the tool and its arguments, in canonical form."""
    return json.dumps([tool, args], sort_keys=True, separators=(",", ":"))


class Counterfactual:
    """The recorded calls a run answers instead of running (none unless it is a
    counterfactual fork); the first recorded output of a call answers it every time."""

    def __init__(self, reuse: Reuse | None, audit: AuditLog) -> None:
        self._audit = audit
        self._source = reuse.run_id if reuse is not None else ""
        calls: list[RecordedCall] = reuse.tools if reuse is not None else []
        self._outputs = {call_key(c.tool, c.args): c.output for c in reversed(calls)}

    def has(self, tool: str, args: dict[str, Any]) -> bool:
        """Whether this call is answered from a recording (so asks no approval)."""
        return bool(self._outputs) and call_key(tool, args) in self._outputs

    def answer(self, step_id: str, tool: str, args: dict[str, Any]) -> ToolResult | None:
        """The recorded result of this call, noted in the audit trail; None: it runs."""
        if not self.has(tool, args):
            return None
        self._audit.record(
            "longrun",
            "replayed",
            f"{step_id}: {tool} answered from the recorded output of {self._source}; nothing ran",
        )
        return ToolResult(output=self._outputs[call_key(tool, args)], attempt=0, replayed=True)
