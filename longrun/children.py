"""Child runs, as pure logic the workflow uses: their ids, their input from their parent's,
and a for_each's `{{item}}`.

Nothing here does I/O, reads a clock or draws randomness, so the workflow may call it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from longrun.contracts import AgentSpec, Budget, RunInput, RunSpec
from longrun.grants import grant_of
from longrun.plans import ReferenceError_, acceptance_of, child_request, lookup, render

_ITEM_TEMPLATE = re.compile(r"\{\{\s*item((?:\.[A-Za-z0-9_-]+)*)\s*\}\}")


def child_run_id(parent_run_id: str, step_id: str, item: int | None = None) -> str:
    """A child run's id: its parent's, the step that starts it and, in a for_each, its
    item's index (RUN_ID_PATTERN)."""
    suffix = f":{step_id}" if item is None else f":{step_id}:{item}"
    return parent_run_id + suffix


def with_item(value: Any, item: Any) -> Any:
    """`value` with `{{item}}` and `{{item.<path>}}` replaced by the item (or the part of
    it): a string that is one such template becomes the value itself, other strings get it
    as text. A for_each nested inside keeps its own `{{item}}`."""
    if isinstance(value, str):
        whole = _ITEM_TEMPLATE.fullmatch(value)
        if whole is not None:
            return _part(item, whole.group(1), whole.group(0))
        return _ITEM_TEMPLATE.sub(lambda m: render(_part(item, m.group(1), m.group(0))), value)
    if isinstance(value, Mapping):
        return {k: v if k == "for_each" else with_item(v, item) for k, v in value.items()}
    if isinstance(value, list):
        return [with_item(v, item) for v in value]
    return value


def _part(item: Any, path: str, where: str) -> Any:
    return lookup(item, [p for p in path.split(".") if p], where)


def item_spec(spec: RunSpec, item: Any) -> RunSpec:
    """A for_each's child spec for one item; raises ReferenceError_ if the item lacks a
    field the spec names, or the spec becomes invalid with it."""
    filled = with_item(spec.model_dump(exclude_none=True), item)
    try:
        return RunSpec.model_validate(filled)
    except ValueError as exc:
        raise ReferenceError_(f"the item does not fit the child run: {exc}") from None


def child_input(
    parent: RunInput, spec: RunSpec, run_id: str, budget: Budget, tools: Iterable[str]
) -> RunInput:
    """A child run's input: the parent's settings, owner, labels and MCP tools, the spec's
    plan or goal, and the budget carved for it. A goal-only child gets the parent's models
    and bounds, and `tools` (what the parent's policy allows) unless the spec names some."""
    common: dict[str, Any] = {
        "run_id": run_id,
        "goal": spec.goal,
        "labels": parent.labels,
        "config": parent.config,
        "owner": parent.owner,
        # A child may use at most what its parent may, however its plan came to be.
        "secrets": grant_of(parent).names,
        "tenant": parent.tenant,
        "budget": budget,
        "mcp_tools": parent.mcp_tools,
        "parent_run_id": parent.run_id,
        "depth": parent.depth + 1,
    }
    if spec.plan is not None:
        return RunInput(**common, plan=spec.plan)
    model = parent.config.default_model
    bounds: dict[str, Any] = {}
    if parent.agent is not None:
        a = parent.agent
        bounds = {
            "planner_model": a.planner_model,
            "actor_model": a.actor_model,
            "judge_model": a.judge_model,
            "max_steps": a.max_steps,
            "watchdog": a.watchdog,
            "strategy": a.strategy,
        }
    agent = AgentSpec(
        acceptance=acceptance_of(child_request(spec)),
        tools=list(spec.tools if spec.tools is not None else tools),
        **{"planner_model": model, "actor_model": model, "judge_model": model, **bounds},
    )
    return RunInput(**common, agent=agent)
