"""A for_each step: one child run or tool call per item, at most `max_parallel` at a time,
their outputs gathered in the items' order; a failed item follows the step's `on_failure`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.changes import baseline_retired
from workflows.common import StepFailed, failure_of, secret_approval
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    from longrun import plans
    from longrun.children import item_spec, with_item
    from longrun.contracts import MAX_ITEMS, ForEachSpec, Step


class ForEach:
    """Runs one for_each step over its (resolved) items."""

    def __init__(
        self, parts: RunParts, step: Step, items: Any, output_of: Callable[[str], Any]
    ) -> None:
        assert step.for_each is not None
        self._parts = parts
        self._step = step
        self._each: ForEachSpec = step.for_each
        if not isinstance(items, list):
            kind = type(items).__name__
            raise StepFailed(f"for_each needs a list of items, not {kind}")
        if len(items) > MAX_ITEMS:
            raise StepFailed(f"for_each takes at most {MAX_ITEMS} items, not {len(items)}")
        self._items: list[Any] = items
        self._output_of = output_of  # an earlier step's output (the scheduler's)

    async def run(self) -> dict[str, Any]:
        """Every item's output in order (None for a failed item that was skipped) and the
        errors of those, by index; StepFailed at the first failure unless skipping."""
        outputs: list[Any] = [None] * len(self._items)
        errors: dict[str, str] = {}
        running: dict[int, asyncio.Task[Any]] = {}
        upcoming = iter(range(len(self._items)))
        skip = self._step.on_failure == "skip"
        try:
            while True:
                while len(running) < self._each.max_parallel:
                    index = next(upcoming, None)
                    if index is None:
                        break
                    running[index] = asyncio.create_task(self._one(index))
                if not running:
                    break
                await workflow.wait(list(running.values()), return_when=asyncio.FIRST_COMPLETED)
                for index, task in list(running.items()):  # in start order, for replay
                    if not task.done():
                        continue
                    del running[index]
                    try:
                        outputs[index] = task.result()
                    except StepFailed as exc:
                        if not skip:
                            raise StepFailed(
                                f"item {index}: {exc}",
                                compensate=self._step.on_failure == "compensate",
                            ) from None
                        errors[str(index)] = str(exc)
        finally:
            for task in running.values():
                task.cancel()
            await asyncio.gather(*running.values(), return_exceptions=True)
        return {"items": outputs, "errors": errors} if errors else {"items": outputs}

    async def _one(self, index: int) -> Any:
        item = self._items[index]
        p = self._parts
        try:
            if self._each.run is not None:
                spec = item_spec(self._each.run, item)
                goal = plans.resolve_text(spec.goal, self._output_of)
                spec = spec.model_copy(update={"goal": goal})
                return await p.children.run(self._step.id, spec, index)
            assert self._each.tool is not None
            args = dict(plans.resolve(with_item(self._each.args, item), self._output_of))
        except plans.ReferenceError_ as exc:
            raise StepFailed(str(exc)) from None
        tool = self._each.tool
        policy = p.inp.config.policy
        if not p.calls.counterfactual.has(tool, args):  # a replayed call runs nothing
            baseline_retired()
            binding = policy.binding_approval(tool, args)
            if binding is None and p.tools[tool].exposes_secrets:
                binding = secret_approval(policy, tool, args)
            if binding:  # one approval covers the step's items as submitted, not this one
                raise StepFailed(f"not as an item of a for_each: {binding}; make it a step")
            await p.ledger.checkpoint("tool")
        call_id = f"{self._step.id}[{index}]"
        try:
            result = await p.calls.tool(
                call_id, tool, args, retry=self._step.retry, timeout_s=self._step.timeout_s
            )
        except ActivityError as exc:
            message, _ = failure_of(exc)
            raise StepFailed(message) from None
        if not result.replayed:
            p.undo.remember(call_id, tool, args, result.output)
        return result.output
