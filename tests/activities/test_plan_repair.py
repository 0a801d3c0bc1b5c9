"""A planner's answer made into a plan where it can be (activities/repair.py): what small
models wrote on servers that enforce no limits, each repair said, and what stays refused."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from activities.repair import repaired
from longrun.contracts import AgentPlan


def plan_of(value: Any) -> tuple[AgentPlan, list[str]]:
    fixed, repairs = repaired(value)
    return AgentPlan.model_validate(fixed), repairs


def test_a_valid_plan_is_left_as_it_is() -> None:
    value = {"steps": [{"id": "write", "intent": "write it", "expected_evidence": "the file"}]}
    plan, repairs = plan_of(value)
    assert repairs == []
    assert plan.model_dump() == value


def test_sentences_for_ids_become_unique_slugs() -> None:
    plan, repairs = plan_of(
        {
            "steps": [
                {"id": "Write hello into file", "intent": "a", "expected_evidence": "x"},
                {"id": "write hello into FILE!", "intent": "b", "expected_evidence": "y"},
                {"id": 3, "intent": "c", "expected_evidence": "z"},
                {"intent": "Fetch the MOTD", "expected_evidence": "z"},
            ]
        }
    )
    assert [s.id for s in plan.steps] == [
        "write-hello-into-file",
        "write-hello-into-file-2",
        "3",
        "fetch-the-motd",
    ]
    assert "step 1: id 'Write hello into file' made 'write-hello-into-file'" in repairs


def test_missing_evidence_is_derived_and_other_names_are_read() -> None:
    plan, repairs = plan_of(
        [
            {"id": "a", "intent": "write sum.txt", "expected_evidence": ""},
            {"id": "b", "description": "read it back", "evidence": "the content"},
            "check the result",
        ]
    )
    a, b, c = plan.steps
    assert "write sum.txt" in a.expected_evidence
    assert (b.intent, b.expected_evidence) == ("read it back", "the content")
    assert (c.id, c.intent) == ("check-the-result", "check the result")
    assert "a list of steps taken as the plan" in repairs
    assert "step 1: evidence derived from its intent" in repairs
    assert "step 3 written as text taken as its intent" in repairs


def test_steps_under_another_key_or_one_step_alone_are_found() -> None:
    plan, repairs = plan_of({"plan": [{"id": "x", "intent": "do", "expected_evidence": "e"}]})
    assert [s.id for s in plan.steps] == ["x"]
    assert repairs == ["the steps found under 'plan'"]
    plan, repairs = plan_of({"id": "only", "intent": "do it", "expected_evidence": "done"})
    assert [s.id for s in plan.steps] == ["only"] and repairs == ["one step taken as the plan"]


def test_fields_the_plan_has_no_place_for_are_dropped_and_said() -> None:
    plan, repairs = plan_of(
        {
            "steps": [{"id": "a", "intent": "i", "expected_evidence": "e", "tool": "write_file"}],
            "reasoning": "because",
        }
    )
    assert plan.steps[0].model_dump() == {"id": "a", "intent": "i", "expected_evidence": "e"}
    assert "dropped fields ['reasoning']" in repairs
    assert "step 1: dropped fields ['tool']" in repairs


@pytest.mark.parametrize(
    "value",
    [
        "not a plan",
        {"steps": []},
        {"steps": [{"id": "a"}, 7]},
        {"thoughts": "none", "answer": "no"},
    ],
)
def test_what_no_repair_makes_a_plan_is_still_refused(value: Any) -> None:
    with pytest.raises(ValidationError):
        plan_of(value)
