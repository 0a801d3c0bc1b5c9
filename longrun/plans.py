"""Pure plan logic shared by the API (validation) and the workflow (scheduling, references).

Nothing here does I/O, reads a clock or draws randomness, so the workflow may call it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel

from longrun import refs
from longrun.contracts import (
    DELEGATE,
    LIMITS,
    Budget,
    Criterion,
    JudgeCheck,
    Limits,
    Plan,
    RunRequest,
    RunSpec,
    SideEffect,
    Step,
    ToolCheck,
)
from longrun.mcp_servers import PREFIX as MCP_PREFIX
from longrun.policy import Policy

_TEMPLATE = re.compile(r"\{\{(.*?)\}\}", re.DOTALL)
_REFERENCE = re.compile(r"^\s*steps\.([a-z0-9_-]{1,64})\.output((?:\.[A-Za-z0-9_-]+)*)\s*$")
_ITEM = re.compile(r"^\s*item((?:\.[A-Za-z0-9_-]+)*)\s*$")
# Child runs may start child runs of their own, this many levels deep.
MAX_CHILD_DEPTH = 3

Loc = tuple[str | int, ...]


class ToolCatalogue(Protocol):
    """What plan validation needs to know about a tool."""

    @property
    def exposes_secrets(self) -> bool: ...

    def args_errors(self, args: dict[str, Any]) -> list[tuple[Loc, str]]: ...

    def side_effect_for(self, args: dict[str, Any]) -> SideEffect: ...


class PlanError(BaseModel):
    """One problem with a plan, located by its path in the request body."""

    loc: Loc
    msg: str


class ReferenceError_(ValueError):
    """A template reference that cannot be resolved."""


def dependencies(plan: Plan) -> dict[str, list[str]]:
    """Each step's dependencies; a step without `depends_on` depends on the previous one."""
    deps: dict[str, list[str]] = {}
    previous: str | None = None
    for step in plan.steps:
        if step.depends_on is not None:
            deps[step.id] = list(step.depends_on)
        else:
            deps[step.id] = [previous] if previous else []
        previous = step.id
    return deps


def ancestors(deps: Mapping[str, list[str]]) -> dict[str, set[str]]:
    """Transitive dependencies of each step (assumes the graph has no cycle). Iterative:
    a chain of a thousand steps must not exhaust the interpreter's stack."""
    memo: dict[str, set[str]] = {}
    for root in deps:
        stack = [(root, False)]
        while stack:
            node, expanded = stack.pop()
            if node in memo:
                continue
            if expanded:  # its dependencies are done
                found: set[str] = set()
                for dep in deps.get(node, []):
                    found.add(dep)
                    found |= memo.get(dep, set())
                memo[node] = found
            else:
                stack.append((node, True))
                stack.extend((dep, False) for dep in deps.get(node, []) if dep not in memo)
    return memo


def _find_cycle(deps: Mapping[str, list[str]]) -> list[str] | None:
    """A dependency cycle, as the path that closes it, or None (iterative depth-first)."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(deps, white)
    for root in deps:
        if colour[root] != white:
            continue
        colour[root] = grey
        path = [root]
        pending = [iter(deps.get(root, []))]
        while pending:
            for dep in pending[-1]:
                seen = colour.get(dep)
                if seen == grey:
                    return [*path[path.index(dep) :], dep]
                if seen == white:
                    colour[dep] = grey
                    path.append(dep)
                    pending.append(iter(deps.get(dep, [])))
                    break
            else:
                colour[path.pop()] = black
                pending.pop()
    return None


def iter_strings(value: Any, loc: Loc = ()) -> Iterator[tuple[Loc, str]]:
    """Every string inside a JSON-like value, with its path."""
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from iter_strings(item, (*loc, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from iter_strings(item, (*loc, index))


def references(text: str, items: bool = False) -> list[tuple[str, list[str]]]:
    """The `{{steps.<id>.output.<path>}}` references in a string; raises on a malformed one.
    With `items` (inside a for_each), `{{item}}` and `{{item.<path>}}` are allowed too (and
    not listed)."""
    found = []
    for match in _TEMPLATE.finditer(text):
        if items and _ITEM.match(match.group(1)):
            continue
        ref = _REFERENCE.match(match.group(1))
        if ref is None:
            hint = " (or {{item}} inside a for_each)" if not items else " or {{item.<field>}}"
            raise ReferenceError_(
                f"malformed reference '{{{{{match.group(1)}}}}}': "
                "write {{steps.<step id>.output.<field>}}" + hint
            )
        path = [p for p in ref.group(2).split(".") if p]
        found.append((ref.group(1), path))
    return found


def referenced_steps(step: Step) -> set[str]:
    """The ids of the steps whose outputs `step` refers to."""
    return {ref for _, text, items in _templated_fields(step) for ref, _ in references(text, items)}


def _templated_fields(step: Step) -> Iterator[tuple[Loc, str, bool]]:
    """The step's strings that may refer to earlier steps' outputs (a child run's plan
    refers to its own steps), and whether `{{item}}` may appear in each."""
    if step.tool is not None:
        for loc, text in iter_strings(step.args, ("args",)):
            yield loc, text, False
    if step.model is not None:
        yield ("model", "prompt"), step.model.prompt, False
        if step.model.system:
            yield ("model", "system"), step.model.system, False
    if step.approval is not None:
        yield ("approval", "message"), step.approval.message, False
    if step.run is not None:
        yield ("run", "goal"), step.run.goal, False
    if step.for_each is not None:
        each = step.for_each
        if isinstance(each.items, str):
            yield ("for_each", "items"), each.items, False
        for loc, text in iter_strings(each.args, ("for_each", "args")):
            yield loc, text, True
        if each.run is not None:
            yield ("for_each", "run", "goal"), each.run.goal, True


def validate_plan(
    plan: Plan,
    tools: Mapping[str, ToolCatalogue],
    policy: Policy | None = None,
    base: Loc = ("body", "plan", "steps"),
    depth: int = 0,
    items: bool = False,
) -> list[PlanError]:
    """Check what a schema cannot: ids, dependencies, cycles, references, tools and their
    args, child runs. `base` locates the plan's steps in the request; `depth` is how deep
    in child runs the plan is; `items` allows `{{item}}` (a for_each's child plan)."""
    errors: list[PlanError] = []
    index_of: dict[str, int] = {}
    for i, step in enumerate(plan.steps):
        if step.id in index_of:
            errors.append(
                PlanError(
                    loc=(*base, i, "id"),
                    msg=f"duplicate step id '{step.id}' (first used by step {index_of[step.id]})",
                )
            )
        else:
            index_of[step.id] = i
    if errors:
        return errors

    deps = dependencies(plan)
    for i, step in enumerate(plan.steps):
        for j, dep in enumerate(step.depends_on or []):
            if dep not in index_of:
                errors.append(
                    PlanError(
                        loc=(*base, i, "depends_on", j), msg=f"depends on unknown step '{dep}'"
                    )
                )
            elif dep == step.id:
                errors.append(
                    PlanError(loc=(*base, i, "depends_on", j), msg="a step cannot depend on itself")
                )
    if errors:
        return errors
    cycle = _find_cycle(deps)
    if cycle:
        first = index_of[cycle[0]]
        errors.append(
            PlanError(
                loc=(*base, first, "depends_on"),
                msg="dependency cycle: " + " -> ".join(cycle),
            )
        )
        return errors

    before = ancestors(deps)
    for i, step in enumerate(plan.steps):
        for loc, text, field_items in _templated_fields(step):
            try:
                refs = references(text, items or field_items)
            except ReferenceError_ as exc:
                errors.append(PlanError(loc=(*base, i, *loc), msg=str(exc)))
                continue
            for ref_id, _ in refs:
                if ref_id not in index_of:
                    msg = f"references unknown step '{ref_id}'"
                elif ref_id not in before[step.id]:
                    msg = (
                        f"references step '{ref_id}', which is not among this step's "
                        "dependencies; add it to depends_on"
                    )
                else:
                    continue
                errors.append(PlanError(loc=(*base, i, *loc), msg=msg))
        if step.tool is not None:
            errors += check_tool_call(step.tool, step.args, (*base, i), tools, policy)
        if step.model is not None and step.model.json_schema is not None:
            try:
                Draft202012Validator.check_schema(step.model.json_schema)
            except SchemaError as exc:
                loc = (*base, i, "model", "json_schema")
                errors.append(PlanError(loc=loc, msg=f"not a valid JSON schema: {exc.message}"))
        if step.run is not None or step.for_each is not None:
            errors += _check_children(step, (*base, i), tools, policy, depth, items)
    return errors


def _check_children(
    step: Step,
    loc: Loc,
    tools: Mapping[str, ToolCatalogue],
    policy: Policy | None,
    depth: int,
    items: bool,
) -> list[PlanError]:
    """A run or for_each step: not too deep, a list to go over, a valid child or call."""
    if depth >= MAX_CHILD_DEPTH:
        msg = f"child runs nest at most {MAX_CHILD_DEPTH} levels deep"
        return [PlanError(loc=(*loc, step.kind), msg=msg)]
    each = step.for_each
    if each is None:
        assert step.run is not None
        return validate_child(step.run, (*loc, "run"), tools, policy, depth + 1, items)
    errors = []
    if isinstance(each.items, str) and not _whole_reference(each.items):
        msg = "a list, or exactly one reference {{steps.<step id>.output.<field>}} to one"
        errors.append(PlanError(loc=(*loc, "for_each", "items"), msg=msg))
    if each.tool is not None:
        errors += check_tool_call(each.tool, each.args, (*loc, "for_each"), tools, policy)
    if each.run is not None:
        at = (*loc, "for_each", "run")
        errors += validate_child(each.run, at, tools, policy, depth + 1, items=True)
    return errors


def child_run_errors(
    plan: Plan, limit: int, base: Loc = ("body", "plan", "steps")
) -> list[PlanError]:
    """The child runs a plan is sure to start (run steps, and for_each items it lists), its
    children's plans included, if one plan would start more than `limit` (the server's
    LONGRUN_MAX_CHILD_RUNS)."""
    errors: list[PlanError] = []
    planned = 0
    for i, step in enumerate(plan.steps):
        each = step.for_each
        spec = step.run or (each.run if each is not None else None)
        if spec is None:
            continue
        planned += len(each.items) if each is not None and isinstance(each.items, list) else 1
        if spec.plan is not None:
            kind = ("run",) if each is None else ("for_each", "run")
            errors += child_run_errors(spec.plan, limit, (*base, i, *kind, "plan", "steps"))
    if planned > limit:
        msg = f"starts {planned} child runs; this server allows {limit} per run"
        errors.insert(0, PlanError(loc=base, msg=msg))
    return errors


def _whole_reference(text: str) -> bool:
    matches = list(_TEMPLATE.finditer(text))
    return len(matches) == 1 and matches[0].span() == (0, len(text))


def child_request(spec: RunSpec) -> RunRequest:
    """A child run's spec as the request it would be on its own (how it is checked)."""
    return RunRequest(goal=spec.goal, plan=spec.plan, acceptance=spec.acceptance, tools=spec.tools)


def validate_child(
    spec: RunSpec,
    at: Loc,
    tools: Mapping[str, ToolCatalogue],
    policy: Policy | None,
    depth: int,
    items: bool,
) -> list[PlanError]:
    """Check a child run's spec as a request of its own, located at `at`."""
    body = child_request(spec)
    errors = validate_agent(body, tools, policy, at)
    if spec.plan is not None:
        base = (*at, "plan", "steps")
        errors = validate_plan(spec.plan, tools, policy, base, depth, items) + errors
    return errors


def check_tool_call(
    tool: str,
    args: dict[str, Any],
    loc: Loc,
    tools: Mapping[str, ToolCatalogue],
    policy: Policy | None,
) -> list[PlanError]:
    """A tool call a request names: a known tool, allowed by policy, with valid arguments."""
    spec = tools.get(tool)
    if spec is None:
        known = ", ".join(sorted(tools))
        return [PlanError(loc=(*loc, "tool"), msg=f"unknown tool '{tool}' (known: {known})")]
    if policy is not None and not policy.allows(tool):
        msg = f"tool '{tool}' is not allowed by this server's policy"
        return [PlanError(loc=(*loc, "tool"), msg=msg)]
    return [PlanError(loc=(*loc, "args", *at), msg=msg) for at, msg in spec.args_errors(args)]


def normalize_plan(
    plan: Plan, tools: Mapping[str, ToolCatalogue], policy: Policy | None = None
) -> Plan:
    """Fill in defaults the workflow relies on: explicit dependencies and approval gates.

    A tool step's `requires_approval` defaults to the policy's default for the call (by
    default: whether it is irreversible). Call only on a plan `validate_plan` accepted.
    """
    policy = policy or Policy()
    deps = dependencies(plan)
    steps = []
    for step in plan.steps:
        gate = step.requires_approval
        each = step.for_each
        tool, args = (each.tool, each.args) if each is not None else (step.tool, step.args)
        if gate is None:
            gate = False
            if tool is not None:
                effect = tools[tool].side_effect_for(args)
                gate = policy.default_approval(tool, effect)
        update: dict[str, Any] = {"depends_on": deps[step.id], "requires_approval": gate}
        if step.run is not None:
            update["run"] = _normal_child(step.run, tools, policy)
        if each is not None and each.run is not None:
            update["for_each"] = each.model_copy(
                update={"run": _normal_child(each.run, tools, policy)}
            )
        steps.append(step.model_copy(update=update))
    return Plan(steps=steps)


def _normal_child(spec: RunSpec, tools: Mapping[str, ToolCatalogue], policy: Policy) -> RunSpec:
    if spec.plan is None:
        return spec
    return spec.model_copy(update={"plan": normalize_plan(spec.plan, tools, policy)})


def lookup(value: Any, path: list[str], where: str) -> Any:
    """The value at `path` (keys, or list indices as digits) inside `value`. Inside a stored
    JSON value the answer is a reference to the part, which the activity reads back."""
    for at, key in enumerate(path):
        if refs.is_ref(value):
            inner = refs.within(value, path[at:])
            if inner is None:
                raise ReferenceError_(f"{where}: no field '{key}' (the output is stored text)")
            return inner
        try:
            value = refs.part(value, [key], where)
        except LookupError as exc:
            raise ReferenceError_(str(exc)) from None
    return value


def render(value: Any) -> str:
    """A referenced value as text: strings as they are, artifacts as markers the activity
    expands, anything else as JSON."""
    return refs.marker(value) if refs.is_ref(value) else refs.as_text(value)


def resolve_text(text: str, output_of: Callable[[str], Any]) -> str:
    """Resolve references where the result must be text."""
    return render(resolve(text, output_of))


def resolve(value: Any, output_of: Callable[[str], Any]) -> Any:
    """Replace references in every string of `value` with the referenced outputs.

    A string that is exactly one reference becomes the referenced value itself; a reference
    inside a longer string is rendered as text (JSON for non-strings).
    """
    if isinstance(value, str):
        if not references(value):
            return value

        def fetch(match: re.Match[str]) -> Any:
            ref = _REFERENCE.match(match.group(1))
            assert ref is not None  # references() accepted every template above
            step_id = ref.group(1)
            path = [p for p in ref.group(2).split(".") if p]
            return lookup(output_of(step_id), path, match.group(0))

        # Exactly one reference, spanning the string ("{{a}}{{b}}" is two, rendered as text).
        matches = list(_TEMPLATE.finditer(value))
        if len(matches) == 1 and matches[0].span() == (0, len(value)):
            return fetch(matches[0])

        return _TEMPLATE.sub(lambda match: render(fetch(match)), value)
    if isinstance(value, Mapping):
        return {k: resolve(v, output_of) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, output_of) for v in value]
    return value


AGENT_ONLY_FIELDS = ("acceptance", "tools", "models", "max_steps", "watchdog", "strategy")


def check_limits(limits: Limits, ceilings: Limits, loc: Loc) -> list[PlanError]:
    """Limits above the server's ceilings, as errors."""
    errors = []
    for name in LIMITS:
        value, ceiling = getattr(limits, name), getattr(ceilings, name)
        if value is not None and ceiling is not None and value > ceiling:
            errors.append(
                PlanError(
                    loc=(*loc, name), msg=f"{value:g} is above this server's ceiling {ceiling:g}"
                )
            )
    return errors


def effective_budget(requested: Budget | None, defaults: Limits, ceilings: Limits) -> Budget:
    """The budget a run gets: what it asked for, else the default, else the ceiling."""
    requested = requested or Budget()
    chosen = {
        name: next(
            (
                v
                for v in (
                    getattr(requested, name),
                    getattr(defaults, name),
                    getattr(ceilings, name),
                )
                if v is not None
            ),
            None,
        )
        for name in LIMITS
    }
    return Budget(**chosen, on_budget_exhausted=requested.on_budget_exhausted)


def validate_agent(
    body: RunRequest,
    tools: Mapping[str, ToolCatalogue],
    policy: Policy | None = None,
    at: Loc = ("body",),
) -> list[PlanError]:
    """Check a goal-only request (located at `at`): known tools, unique criteria, valid
    check arguments.

    With an explicit plan, the agent-only fields are refused rather than ignored.
    """
    errors: list[PlanError] = []
    if body.plan is not None:
        for name in AGENT_ONLY_FIELDS:
            if getattr(body, name) is not None:
                errors.append(
                    PlanError(loc=(*at, name), msg=f"'{name}' applies only to runs without a plan")
                )
        return errors
    for i, name in enumerate(body.tools or []):
        if name == DELEGATE and (policy is None or policy.allows(name)):
            continue  # not a tool: the agent's hand-over to a child run
        if name not in tools:
            known = ", ".join(sorted(tools))
            errors.append(
                PlanError(loc=(*at, "tools", i), msg=f"unknown tool '{name}' (known: {known})")
            )
        elif policy is not None and not policy.allows(name):
            errors.append(
                PlanError(
                    loc=(*at, "tools", i),
                    msg=f"tool '{name}' is not allowed by this server's policy",
                )
            )
    seen: set[str] = set()
    for i, criterion in enumerate(body.acceptance or []):
        loc: Loc = (*at, "acceptance", i)
        if criterion.id in seen:
            errors.append(
                PlanError(loc=(*loc, "id"), msg=f"duplicate criterion id '{criterion.id}'")
            )
        seen.add(criterion.id)
        check = criterion.check
        if isinstance(check, ToolCheck) and check.tool.startswith(MCP_PREFIX):
            msg = "an MCP tool cannot be a check: checks call built-in tools only"
            errors.append(PlanError(loc=(*loc, "check", "tool"), msg=msg))
        elif isinstance(check, ToolCheck):
            found = check_tool_call(check.tool, check.args, (*loc, "check"), tools, policy)
            errors += found
            why = policy.binding_approval(check.tool, check.args) if policy else None
            if not found and not why and tools[check.tool].exposes_secrets:
                why = (policy or Policy()).secret_approval(check.tool, check.args)
            if not found and why:
                # A check runs unattended, so it cannot be a call that policy gates.
                errors.append(PlanError(loc=(*loc, "check", "tool"), msg=f"not as a check: {why}"))
    return errors


def acceptance_of(body: RunRequest) -> list[Criterion]:
    """The run's criteria; with none given, a judge must confirm the goal is met."""
    if body.acceptance:
        return list(body.acceptance)
    return [Criterion(id="goal", check=JudgeCheck(judge=f"The goal is met: {body.goal}"))]
