"""A planner's answer made into a plan where it can be, each repair said.

Grammar engines are sent the plan's schema without its limits (activities/structured), so a
small model writes step ids as sentences, leaves evidence empty, wraps the steps in another
key or writes a step as a string. None of that makes the plan wrong: the ids are made slugs
(unique), missing evidence is derived from the step's intent, the steps are found where the
model put them, and fields the plan has no place for are dropped. What no repair can make a
plan (no step with an intent) is left for validation to refuse, saying what.

Pure functions: `activities/model.py` applies them to every plan answer.
"""

from __future__ import annotations

import re
from typing import Any

from longrun.contracts.agent import MAX_AGENT_PLAN_STEPS

ID_CHARS = 64
TEXT_CHARS = 2000
# Where a model puts what a step does, and what shows it done, when not in the plan's names.
INTENT_KEYS = ("intent", "description", "action", "task", "step", "goal", "title", "name")
EVIDENCE_KEYS = ("expected_evidence", "evidence", "expected", "verification", "expected_result")
_NOT_SLUG = re.compile(r"[^a-z0-9_-]+")


def repaired(value: Any) -> tuple[Any, list[str]]:
    """`value` as a plan where it can be made one, and the repairs made."""
    repairs: list[str] = []
    if isinstance(value, list):
        value = {"steps": value}
        repairs.append("a list of steps taken as the plan")
    if not isinstance(value, dict):
        return value, repairs
    if "steps" not in value:
        lists = [key for key, found in value.items() if isinstance(found, list)]
        if len(lists) == 1:
            value = {"steps": value[lists[0]]}
            repairs.append(f"the steps found under '{lists[0]}'")
        elif any(key in value for key in INTENT_KEYS):
            value = {"steps": [value]}
            repairs.append("one step taken as the plan")
        else:
            return value, repairs
    raw = value["steps"]
    if not isinstance(raw, list):
        return value, repairs
    if set(value) != {"steps"}:
        repairs.append(f"dropped fields {sorted(set(value) - {'steps'})}")
    steps: list[dict[str, str]] = []
    used: set[str] = set()
    for n, written in enumerate(raw[:MAX_AGENT_PLAN_STEPS], 1):
        step = _step(written, n, used, repairs)
        if step is not None:
            steps.append(step)
    return {"steps": steps}, repairs


def _step(written: Any, n: int, used: set[str], repairs: list[str]) -> dict[str, str] | None:
    if isinstance(written, str):
        written = {"intent": written}
        repairs.append(f"step {n} written as text taken as its intent")
    if not isinstance(written, dict):
        repairs.append(f"step {n} dropped: not an object")
        return None
    intent, intent_key = _first_text(written, INTENT_KEYS)
    if intent is None:
        repairs.append(f"step {n} dropped: it says nothing to do")
        return None
    evidence, evidence_key = _first_text(written, EVIDENCE_KEYS)
    if evidence is None:
        evidence = f"A tool's output showing this was done: {intent}"
        repairs.append(f"step {n}: evidence derived from its intent")
    elif evidence_key != "expected_evidence":
        repairs.append(f"step {n}: evidence taken from '{evidence_key}'")
    if intent_key != "intent":
        repairs.append(f"step {n}: intent taken from '{intent_key}'")
    given = written.get("id")
    given_text = str(given) if isinstance(given, (str, int)) else ""
    step_id = _unique(_slug(given_text) or _slug(intent) or f"step-{n}", used)
    if step_id != given_text:
        repairs.append(f"step {n}: id {given_text[:80]!r} made {step_id!r}")
    extra = sorted(set(written) - {"id", "intent", "expected_evidence", intent_key, evidence_key})
    if extra:
        repairs.append(f"step {n}: dropped fields {extra}")
    return {
        "id": step_id,
        "intent": intent[:TEXT_CHARS],
        "expected_evidence": evidence[:TEXT_CHARS],
    }


def _first_text(written: dict[str, Any], keys: tuple[str, ...]) -> tuple[str | None, str]:
    """The first of `keys` holding text, and which; (None, "") if none does."""
    for key in keys:
        found = written.get(key)
        if isinstance(found, str) and found.strip():
            return found.strip(), key
    return None, ""


def _slug(text: str) -> str:
    return _NOT_SLUG.sub("-", text.lower()).strip("-")[:ID_CHARS].strip("-")


def _unique(step_id: str, used: set[str]) -> str:
    candidate, n = step_id, 2
    while candidate in used:
        suffix = f"-{n}"
        candidate = step_id[: ID_CHARS - len(suffix)] + suffix
        n += 1
    used.add(candidate)
    return candidate
