"""Structured answers from servers that differ: the four ways to ask for JSON, the schema
as grammar engines accept it, and the checks every answer passes whatever way it came.

Pure functions: `activities/endpoint.py` chooses the way per model and makes the call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

Mode = Literal["json_schema", "json_object", "tool", "prompt"]
# From the most to the least a server must support; `auto` walks down this list.
MODES: tuple[Mode, ...] = ("json_schema", "json_object", "tool", "prompt")

# Limits grammar compilers choke on (llama.cpp fails to parse, or crashes on, large
# `maxLength`/`maxItems` and some `pattern`s). The server's answer is checked against the
# whole schema afterwards, so dropping them loses no check.
_DROPPED = frozenset(
    {
        "maxLength",
        "minLength",
        "pattern",
        "format",
        "maxItems",
        "minItems",
        "uniqueItems",
        "maxProperties",
        "minProperties",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
    }
)
# Words in an error body that say the server cannot ask for JSON this way (rather than
# that this call failed).
_REFUSAL = re.compile(
    r"response_format|json_schema|json_object|grammar|tool_choice|tools|not supported|"
    r"unsupported|unknown (field|parameter)|extra (fields|inputs)",
    re.IGNORECASE,
)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def simplify(schema: Any, dropped: frozenset[str] = _DROPPED) -> Any:
    """`schema` without the keywords grammar engines reject (see `_DROPPED`), or without
    `dropped`."""
    if isinstance(schema, dict):
        kept = {}
        for key, value in schema.items():
            if key in dropped and not isinstance(value, dict):
                continue
            # Under `properties`, keys are field names, not keywords: keep them all.
            kept[key] = (
                {name: simplify(sub, dropped) for name, sub in value.items()}
                if key in ("properties", "$defs", "definitions") and isinstance(value, dict)
                else simplify(value, dropped)
            )
        return kept
    if isinstance(schema, list):
        return [simplify(item, dropped) for item in schema]
    return schema


def tool_parameters(schema: dict[str, Any]) -> Any:
    """A tool's parameters as a model is offered them: simplified, and without titles,
    which cost tokens and name nothing a model may call (Qwen called `WriteFileArgs`, the
    title of write_file's arguments)."""
    return simplify(schema, _DROPPED | {"title"})


def ask(
    mode: Mode, name: str, schema: dict[str, Any], messages: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The messages and request fields that ask for JSON matching `schema` in `mode`."""
    sent = simplify(schema)
    if mode == "json_schema":
        fmt = {"type": "json_schema", "json_schema": {"name": name, "schema": sent}}
        return messages, {"response_format": fmt}
    if mode == "json_object":
        # llama.cpp turns `schema` into a grammar; servers that ignore it still get JSON,
        # and the schema in the prompt says which.
        return _with_schema(messages, sent), {
            "response_format": {"type": "json_object", "schema": sent}
        }
    if mode == "tool":
        tool = {"type": "function", "function": {"name": name, "parameters": sent}}
        choice = {"type": "function", "function": {"name": name}}
        return messages, {"tools": [tool], "tool_choice": choice}
    return _with_schema(messages, sent), {}


def _with_schema(messages: list[dict[str, Any]], schema: Any) -> list[dict[str, Any]]:
    note = "Answer with one JSON value only, no prose, matching this JSON schema:\n" + json.dumps(
        schema, separators=(",", ":")
    )
    return [*messages, {"role": "system", "content": note}]


def answer_text(mode: Mode, content: str | None, tool_arguments: list[str]) -> str:
    """The text that holds the JSON: a forced tool call's arguments in `tool` mode (or the
    content, for a server that answered in text anyway), the content otherwise."""
    if mode == "tool" and tool_arguments:
        return tool_arguments[0]
    return content or ""


def parse_json(text: str) -> Any:
    """The JSON value in a model's answer, found also inside a code fence or amid prose;
    ValueError says what was wrong."""
    candidates = [text.strip()]
    candidates += [m.strip() for m in _FENCE.findall(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            # strict=False: small models put raw newlines inside strings.
            return json.loads(candidate, strict=False)
        except (ValueError, RecursionError):
            continue
    raise ValueError(f"the answer is not JSON: {text[:200]!r}")


def problems(value: Any, schema: dict[str, Any]) -> str | None:
    """Why `value` does not match `schema` (the first few reasons), or None."""
    try:
        validator = Draft202012Validator(schema)
        errors = sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    except SchemaError as exc:
        return f"the schema itself is invalid: {exc.message}"
    if not errors:
        return None
    reasons = [f"{e.json_path}: {e.message}" for e in errors[:5]]
    return "; ".join(reasons)


def refuses(status: int, body: str) -> bool:
    """Whether an error answer says the server cannot ask for JSON the way it was asked."""
    return status in (400, 404, 422, 500, 501) and bool(_REFUSAL.search(body))


# A quote shorter than this says nothing on its own ("ok", "5").
QUOTE_LEAST_CHARS = 3
_ESCAPES = re.compile(r"\\[nrt]")
_NOT_WORDS = re.compile(r"[\W_]+")


def _words(text: str) -> str:
    """`text` as its words only: a quote and its source compare without case, spacing,
    punctuation, JSON quoting or escapes."""
    return _NOT_WORDS.sub(" ", _ESCAPES.sub(" ", text).lower()).strip()


def quotes(quote: str, sources: Sequence[str]) -> bool:
    """Whether `quote` is taken from one of `sources`, or there are no sources to quote
    from. The ellipsis a model puts for a gap splits a quote into parts that must each be
    found, in order, in one source."""
    sources = [s for s in sources if s.strip()]
    if not sources:
        return True
    parts = [p for p in (_words(p) for p in re.split(r"\.\.\.|…", quote)) if p]
    if sum(map(len, parts)) < QUOTE_LEAST_CHARS:
        return False
    for source in (f" {_words(s)} " for s in sources):
        at = 0
        for part in parts:  # whole words: "ell" is not quoted from "hello"
            found = source.find(f" {part} ", at)
            if found < 0:
                break
            at = found + len(part) + 1
        else:
            return True
    return False
