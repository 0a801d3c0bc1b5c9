"""Structured answers, in plain pytest: the schema as grammar engines take it, JSON found
in what models really say, and answers checked against the whole schema."""

from __future__ import annotations

import pytest

from activities import structured
from activities.endpoint import _on_the_wire, _window_from
from longrun.contracts import AgentPlan


def test_simplified_schemas_keep_structure_and_drop_limits() -> None:
    plan = AgentPlan.model_json_schema()
    simple = structured.simplify(plan)
    text = str(simple)
    for keyword in ("maxLength", "minLength", "pattern", "maxItems", "minItems"):
        assert keyword in str(plan) and keyword not in text
    step = simple["$defs"]["AgentPlanStep"]
    assert set(step["properties"]) == {"id", "intent", "expected_evidence"}
    assert step["required"] == ["id", "intent", "expected_evidence"]
    # A field that happens to be named like a keyword is a field, not a keyword.
    odd = {"type": "object", "properties": {"pattern": {"type": "string", "maxLength": 3}}}
    assert structured.simplify(odd) == {
        "type": "object",
        "properties": {"pattern": {"type": "string"}},
    }


def test_each_mode_asks_in_its_own_way() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string", "maxLength": 9}}}
    messages = [{"role": "user", "content": "hi"}]
    _, fields = structured.ask("json_schema", "x", schema, messages)
    assert fields["response_format"]["json_schema"]["schema"]["properties"]["a"] == {
        "type": "string"
    }
    sent, fields = structured.ask("json_object", "x", schema, messages)
    assert fields["response_format"]["type"] == "json_object" and len(sent) == 2
    _, fields = structured.ask("tool", "x", schema, messages)
    assert fields["tool_choice"] == {"type": "function", "function": {"name": "x"}}
    sent, fields = structured.ask("prompt", "x", schema, messages)
    assert fields == {} and "JSON schema" in sent[-1]["content"]
    assert structured.answer_text("tool", "ignored", ['{"a": 1}']) == '{"a": 1}'
    assert structured.answer_text("tool", '{"a": 2}', []) == '{"a": 2}'


@pytest.mark.parametrize(
    "said",
    [
        '{"a": 1}',
        'Here you are:\n```json\n{"a": 1}\n```',
        'Sure! {"a": 1} Hope that helps.',
    ],
)
def test_json_is_found_where_models_put_it(said: str) -> None:
    assert structured.parse_json(said) == {"a": 1}


def test_not_json_says_what_came() -> None:
    with pytest.raises(ValueError, match="not JSON: 'no idea'"):
        structured.parse_json("no idea")


def test_answers_are_checked_against_the_whole_schema() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 3}, "t": {"type": "number"}},
        "required": ["city", "t"],
    }
    assert structured.problems({"city": "Rome", "t": 1}, schema) == ("$.city: 'Rome' is too long")
    wrong = structured.problems({"name": "Paris", "temperature1": "20.45"}, schema)
    assert wrong is not None and "'city' is a required property" in wrong
    assert structured.problems({"city": "Rio", "t": 1.5}, schema) is None


def test_refusals_are_told_from_failures() -> None:
    assert structured.refuses(500, "Input should be 'text' or 'json_object'... response_format")
    assert structured.refuses(400, "json_schema is not supported by this model")
    assert not structured.refuses(500, "CUDA out of memory")
    assert not structured.refuses(429, "response_format: slow down")


def test_messages_go_out_without_nulls() -> None:
    turn = {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}], "name": None}
    assert _on_the_wire(turn) == {"role": "assistant", "content": "", "tool_calls": [{"id": "c"}]}


@pytest.mark.parametrize(
    ("said", "window"),
    [
        ("This model's maximum context length is 8192 tokens. However, you requested", 8192),
        ("Requested tokens (9000) exceed context window of 2048", 2048),
        ("the input is too long", None),
    ],
)
def test_context_windows_are_read_from_servers_errors(said: str, window: int | None) -> None:
    assert _window_from(said) == window


WROTE = 'write_file {"path": "hello.txt", "content": "hello\\nworld"} -> {"bytes": 11}'


@pytest.mark.parametrize(
    ("quote", "taken"),
    [
        ('"bytes": 11', True),  # as JSON has it
        ("HELLO.TXT", True),  # case and punctuation aside
        ("hello world", True),  # an escaped newline is a space
        ("hello.txt ... bytes: 11", True),  # a gap the model marked
        ("bytes: 11 ... hello.txt", False),  # but in order
        ("ell", False),  # whole words only
        ("I wrote hello.txt", False),  # the agent's words, not the tool's
        ("ok", False),  # too short to show anything
        ("", False),
    ],
)
def test_a_quote_is_found_only_in_what_it_quotes(quote: str, taken: bool) -> None:
    assert structured.quotes(quote, [WROTE, "== hello.txt\nhello\nworld"]) is taken


def test_with_nothing_to_quote_no_quote_is_needed() -> None:
    assert structured.quotes("", []) and structured.quotes("", ["  "])


def test_tools_are_offered_without_titles_but_with_a_field_named_title() -> None:
    schema = {
        "title": "NoteArgs",
        "type": "object",
        "properties": {"title": {"title": "Title", "type": "string", "maxLength": 80}},
    }
    assert structured.tool_parameters(schema) == {
        "type": "object",
        "properties": {"title": {"type": "string"}},
    }
