"""Plan logic that the workflow relies on: default dependencies, gates, references."""

from __future__ import annotations

from typing import Any

import pytest

from longrun.catalogue import CATALOGUE
from longrun.contracts import Plan
from longrun.plans import ReferenceError_, dependencies, normalize_plan, resolve, validate_plan

OUTPUTS: dict[str, Any] = {"a": {"text": "hi", "items": [{"n": 1}, {"n": 2}], "count": 3}}


def _plan(*steps: dict[str, Any]) -> Plan:
    return Plan.model_validate({"steps": list(steps)})


def test_default_dependency_is_the_previous_step() -> None:
    plan = _plan(
        {"id": "a", "tool": "echo"},
        {"id": "b", "tool": "echo"},
        {"id": "c", "tool": "echo", "depends_on": []},
        {"id": "d", "tool": "echo", "depends_on": ["a", "b"]},
    )
    assert dependencies(plan) == {"a": [], "b": ["a"], "c": [], "d": ["a", "b"]}


def test_irreversible_tools_are_gated_unless_the_step_says_otherwise() -> None:
    plan = normalize_plan(
        _plan(
            {"id": "get", "tool": "http_request", "args": {"url": "http://127.0.0.1/"}},
            {"id": "post", "tool": "http_request", "args": {"method": "POST", "url": "http://x/"}},
            {"id": "sh", "tool": "shell", "args": {"argv": ["true"]}},
            {"id": "sh2", "tool": "shell", "args": {"argv": ["true"]}, "requires_approval": False},
            {"id": "w", "tool": "write_file", "args": {"path": "f", "content": ""}},
            {"id": "m", "model": {"prompt": "p"}, "requires_approval": True},
        ),
        CATALOGUE,
    )
    gates = {s.id: s.requires_approval for s in plan.steps}
    assert gates == {"get": False, "post": True, "sh": True, "sh2": False, "w": False, "m": True}


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("{{steps.a.output.text}}", "hi"),
        ("{{ steps.a.output.count }}", 3),
        ("{{steps.a.output.items}}", [{"n": 1}, {"n": 2}]),
        ("n={{steps.a.output.items.1.n}}!", "n=2!"),
        ("all: {{steps.a.output.items}}", 'all: [{"n": 1}, {"n": 2}]'),
        ("{{steps.a.output.text}}{{steps.a.output.count}}", "hi3"),  # two, side by side
        ("no references", "no references"),
    ],
)
def test_references_resolve(template: str, expected: Any) -> None:
    assert resolve({"k": [template]}, OUTPUTS.__getitem__) == {"k": [expected]}


@pytest.mark.parametrize(
    ("template", "reason"),
    [
        ("{{steps.a.output.missing}}", "no field 'missing'"),
        ("{{steps.a.output.items.9}}", "no field '9'"),
        ("{{steps.a.result}}", "malformed reference"),
    ],
)
def test_bad_references_fail_with_a_reason(template: str, reason: str) -> None:
    with pytest.raises(ReferenceError_, match=reason):
        resolve(template, OUTPUTS.__getitem__)


def test_bad_arguments_are_refused_naming_what_the_tool_takes() -> None:
    plan = Plan.model_validate(
        {"steps": [{"id": "w", "tool": "write_file", "args": {"file": "a.txt", "content": "x"}}]}
    )
    errors = validate_plan(plan, CATALOGUE)
    messages = {e.loc: e.msg for e in errors}
    assert (
        "write_file takes: path, content" in messages[("body", "plan", "steps", 0, "args", "file")]
    )
    assert "write_file takes: path" in messages[("body", "plan", "steps", 0, "args", "path")]
