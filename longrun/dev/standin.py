"""An OpenAI-compatible stand-in model server for offline use and tests.

It answers `POST /v1/chat/completions` deterministically, whole or streamed. Tests script
it over HTTP with rules that match on the prompt text and inject replies or faults (an
error status with Retry-After, slow answers or streams, malformed JSON, a stream that
dies); `GET /_standin/calls` lists what it received. A profile (`PUT /_standin/profile`,
or `--profile`) makes it behave as a real server does where servers differ: llama.cpp's
refuses `json_schema`, null content and schemas with length limits, sends no usage in
streams, and has a small context window.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import re
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, TypeAdapter

from longrun import prompts
from longrun.cassettes import Cassette, key_of, nearest

STANDIN_MODEL = "standin-1"


Role = Literal["plan", "act", "judge", "complete"]


class ScriptedToolCall(BaseModel):
    """A tool call the stand-in makes on the model's behalf."""

    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class Rule(BaseModel):
    """A scripted answer for calls whose messages contain `match` (every call if unset; a
    list means all of its strings), optionally only for one role: `plan`, `act` (offered
    tools), `judge` or `complete`."""

    match: str | list[str] | None = None
    role: Role | None = None
    times: int | None = Field(None, ge=1, description="apply this many times; unset = always")
    tool_results: int | None = Field(
        None,
        ge=0,
        description="apply only to a call whose messages hold this many tool results: where "
        "the conversation stands, so a call asked again gets the same answer",
    )
    probability: float | None = Field(
        None, gt=0, le=1, description="apply to a matching call only with this chance"
    )
    reply: str | None = None
    tool_calls: list[ScriptedToolCall] | None = None
    json_reply: Any = Field(None, alias="json")
    status: int | None = Field(None, ge=400, le=599)
    retry_after: float | None = Field(None, ge=0)
    message: str = "injected fault"
    delay_s: float = Field(0.0, ge=0, le=600)
    malformed: bool = False
    chunk_delay_s: float = Field(0.0, ge=0, le=60, description="between streamed chunks")
    finish_reason: str | None = Field(
        None, description="as recorded (else stop, tool_calls, or length past max_tokens)"
    )
    die_after_chunks: int | None = Field(
        None, ge=0, description="streamed: drop the connection after this many chunks"
    )


class Profile(BaseModel):
    """How the server behaves where real servers differ from OpenAI's."""

    name: str = "openai"
    json_schema: bool = Field(True, description="accepts response_format json_schema")
    null_content: bool = Field(True, description="accepts messages whose content is null")
    grammar_limits: bool = Field(
        True, description="compiles schemas with length, pattern and item-count keywords"
    )
    stream_usage: bool = Field(True, description="ends a stream with usage when asked")
    context_window: int | None = Field(None, ge=1, description="prompt + max_tokens limit")
    max_answer: int | None = Field(None, ge=1, description="the largest max_tokens it takes")
    silent_stream_errors: bool = Field(
        False, description="a refused streamed request gets an empty 200 stream, not the error"
    )
    tool_calls_as_text: bool = Field(
        False,
        description="with tools offered and none forced, writes a tool call as JSON text in "
        "its answer instead of calling it, as small models do",
    )
    streams_only_with_tools: bool = Field(
        False,
        description="streams no answer (a role, then the end) to a request that offers no "
        "tools, as llama-cpp-python's chatml-function-calling chat format does",
    )
    read_tps: float | None = Field(
        None, gt=0, description="streamed: prompt tokens read a second before the first token"
    )
    write_tps: float | None = Field(None, gt=0, description="streamed: tokens written a second")


PROFILES = {
    "openai": Profile(),
    # llama-cpp-python's server, as seen with SmolLM2-135M-Instruct.
    "llama-cpp": Profile(
        name="llama-cpp",
        json_schema=False,
        null_content=False,
        grammar_limits=False,
        stream_usage=False,
        context_window=8192,
        silent_stream_errors=True,
    ),
}
# The same server started with tool calls (real-model.sh start --tools).
PROFILES["llama-cpp-tools"] = PROFILES["llama-cpp"].model_copy(
    update={"name": "llama-cpp-tools", "streams_only_with_tools": True}
)
_FUNCTION_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_GRAMMAR_KEYWORDS = ("maxLength", "minLength", "pattern", "maxItems", "minItems")


class Call(BaseModel):
    """One request the stand-in received and what it answered."""

    model: str
    role: Role
    messages: list[dict[str, Any]]
    tools: list[str] = Field(default_factory=list, description="names of the tools offered")
    outcome: str
    at: float = Field(description="arrival, seconds since the epoch")
    prompt_tokens: int = Field(0, description="the prompt's size as the answer's usage gives it")
    max_tokens: int | None = None
    stream: bool = False
    response_format: str | None = Field(None, description="its type, if one was asked for")


def example_of(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> Any:
    """A small value that satisfies a simple JSON schema (following local `$ref`s)."""
    defs = {**(defs or {}), **schema.get("$defs", {})}
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return example_of(defs.get(ref.removeprefix("#/$defs/"), {}), defs)
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: example_of(sub, defs) for name, sub in props.items()}
    if kind == "array":
        items = schema.get("items")
        return [example_of(items, defs)] if schema.get("minItems") and items else []
    return {"string": "stand-in", "integer": 0, "number": 0, "boolean": False}.get(kind)


def schema_of(body: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    """The name and JSON schema a request asks its answer to match, however it asks:
    response_format (json_schema, or json_object with a schema), a forced tool call, or
    the schema written into the prompt."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        if response_format.get("type") == "json_schema":
            spec = response_format.get("json_schema") or {}
            return spec.get("name"), spec.get("schema") or {}
        if isinstance(response_format.get("schema"), dict):
            return None, response_format["schema"]
    forced = _forced_tool(body)
    if forced is not None:
        for tool in body.get("tools") or []:
            function = tool.get("function") or {}
            if function.get("name") == forced:
                return forced, function.get("parameters") or {}
    for message in body.get("messages") or []:
        content = str(message.get("content") or "")
        marker = "matching this JSON schema:\n"
        if message.get("role") == "system" and marker in content:
            try:
                return None, json.loads(content.split(marker, 1)[1])
            except ValueError:
                return None, None
    return None, None


def _forced_tool(body: dict[str, Any]) -> str | None:
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        name = (choice.get("function") or {}).get("name")
        return name if isinstance(name, str) else None
    return None


def role_of(body: dict[str, Any]) -> Role:
    """Which of longrun's roles a request comes from, told by its system prompt or the
    name of the answer it asks for."""
    name, _ = schema_of(body)
    first = (body.get("messages") or [{}])[0]
    system = str(first.get("content") or "") if first.get("role") == "system" else ""
    if name == "plan" or system == prompts.PLANNER:
        return "plan"
    if name == "verdict" or system == prompts.JUDGE:
        return "judge"
    if body.get("tools") or routed(body):
        return "act"
    return "complete"


def _first_tool_result(body: dict[str, Any]) -> str:
    """The first tool result a judge's request lists (what a pass quotes), or ""."""
    said = "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])
    _, _, results = said.partition(f"{prompts.TOOL_RESULTS}\n")
    first = results.split("\n", 1)[0]
    return first[2:] if first.startswith("- ") else ""


def routed(body: dict[str, Any]) -> bool:
    """Whether a request is an actor's call routed by longrun: one action asked for as
    JSON, the tools described in the prompt."""
    said = (str(m.get("content") or "") for m in body.get("messages") or [])
    return any(prompts.ROUTED_ACTION in text for text in said)


def _arguments(call: ScriptedToolCall) -> Any:
    if isinstance(call.arguments, str):
        try:
            return json.loads(call.arguments)
        except ValueError:
            return call.arguments
    return call.arguments


def tokens_of(text: str) -> int:
    """The stand-in's token count: about four characters a token, as for English text."""
    return max(1, len(text) // 4)


def _text_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


class StandIn:
    """State of one stand-in server: its rules and the calls it has answered."""

    def __init__(self, profile: Profile | None = None) -> None:
        self.rules: list[Rule] = []
        self.calls: list[Call] = []
        self._base_profile = profile or Profile()
        self.profile = self._base_profile
        self.cassette: Cassette | None = None
        self._played: dict[str, int] = {}  # times each recorded request was answered
        self.generating = 0  # answers being generated now, streamed or not
        self._lock = threading.Lock()
        self.reset()

    def reset(self, seed: str = "0") -> None:
        """Forget rules, calls, a cassette and a profile set since; reseed the draws of rules
        with a `probability`."""
        with self._lock:
            self.rules.clear()
            self.calls.clear()
            self.profile = self._base_profile
            self.cassette = None
            self._played.clear()
            self._random = random.Random(seed)  # seeded: fault injection repeats run to run

    def play(self, cassette: Cassette) -> None:
        """Answer from `cassette`, as the server it was recorded on (its profile)."""
        with self._lock:
            self.cassette = cassette
            self._played.clear()
            self.profile = PROFILES.get(cassette.profile, self._base_profile)

    def _played_answer(self, body: dict[str, Any]) -> dict[str, Any] | str:
        """The recorded answer to a request (the next one, when it was asked again), or
        why there is none."""
        assert self.cassette is not None
        key = key_of(body)
        found = [e for e in self.cassette.entries if e.key == key]
        if not found:
            return (
                f"the cassette of run {self.cassette.run_id} has no answer for this request; "
                + nearest(body, self.cassette.entries)
            )
        with self._lock:
            n = self._played.get(key, 0)
            self._played[key] = n + 1
        return found[min(n, len(found) - 1)].response

    def _take_rule(self, text: str, role: Role, results: int) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.role not in (None, role):
                    continue
                if rule.tool_results not in (None, results):
                    continue
                needles = [rule.match] if isinstance(rule.match, str) else rule.match or []
                if not all(needle in text for needle in needles):
                    continue
                if rule.probability is None or self._random.random() < rule.probability:
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times == 0:
                            self.rules.remove(rule)
                    return rule
        return None

    def _record(self, body: dict[str, Any], role: Role, outcome: str, tokens: int) -> None:
        tools = [t.get("function", {}).get("name", "?") for t in body.get("tools") or []]
        response_format = body.get("response_format")
        call = Call(
            model=body["model"],
            role=role,
            messages=body["messages"],
            tools=tools,
            outcome=outcome,
            at=time.time(),
            prompt_tokens=tokens,
            max_tokens=body.get("max_tokens") if isinstance(body.get("max_tokens"), int) else None,
            stream=body.get("stream") is True,
            response_format=response_format.get("type")
            if isinstance(response_format, dict)
            else None,
        )
        with self._lock:
            self.calls.append(call)

    async def complete(self, body: dict[str, Any]) -> Response:
        messages = body.get("messages")
        model = body.get("model")
        if not isinstance(messages, list) or not messages or not isinstance(model, str):
            return JSONResponse(
                {"error": {"message": "'model' and a non-empty 'messages' list are required"}},
                status_code=400,
            )
        text = _text_of(messages)
        prompt_tokens = tokens_of(text)
        role = role_of(body)
        refusal = self._refusal(body, prompt_tokens)
        if refusal is not None:
            status, why = refusal
            self._record(body, role, f"{status} refused", prompt_tokens)
            if body.get("stream") and self.profile.silent_stream_errors:
                return StreamingResponse(iter(()), media_type="text/event-stream")
            return JSONResponse({"error": {"message": why}}, status_code=status)
        if body.get("stream") and self.profile.streams_only_with_tools and not body.get("tools"):
            self._record(body, role, "empty stream", prompt_tokens)
            return StreamingResponse(_role_only(model), media_type="text/event-stream")
        if self.cassette is not None:
            played = self._played_answer(body)
            if isinstance(played, str):
                self._record(body, role, "not in the cassette", prompt_tokens)
                # 412: no retry would find it, and no way of asking for JSON would either.
                return JSONResponse({"error": {"message": played}}, status_code=412)
            rule = Rule(
                reply=played.get("content"),
                tool_calls=[
                    ScriptedToolCall(name=c["name"], arguments=c["arguments"])
                    for c in played.get("tool_calls") or []
                ],
                finish_reason=played.get("finish_reason"),
            )
            if rule.reply is None and not rule.tool_calls:
                rule.reply = ""
        else:
            results = sum(1 for m in messages if m.get("role") == "tool")
            rule = self._take_rule(text, role, results) or Rule()
        # Recorded on arrival: a caller that times out on a slow answer still made the call.
        if rule.malformed:
            outcome = "malformed"
        elif rule.status:
            outcome = str(rule.status)
        else:
            outcome = "ok"
        self._record(body, role, outcome, prompt_tokens)
        if rule.delay_s:
            # Generating: a server goes on even when the caller has gone.
            self.generating += 1
            try:
                await asyncio.sleep(rule.delay_s)
            finally:
                self.generating -= 1
        if rule.malformed:
            return PlainTextResponse('{"choices": [', media_type="application/json")
        if rule.status:
            headers = (
                {"retry-after": f"{rule.retry_after:g}"} if rule.retry_after is not None else {}
            )
            return JSONResponse(
                {"error": {"message": rule.message, "type": "standin_fault"}},
                status_code=rule.status,
                headers=headers,
            )
        message = self._message(rule, text, role, body)
        content = message["content"] or ""
        finish = rule.finish_reason or ("tool_calls" if message.get("tool_calls") else "stop")
        max_tokens = body.get("max_tokens")
        if isinstance(max_tokens, int) and tokens_of(content) > max_tokens:
            message["content"] = content = content[: max_tokens * 4]
            finish = "length"
        completion_tokens = tokens_of(content)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        completion_id = f"chatcmpl-{hashlib.sha256(text.encode()).hexdigest()[:24]}"
        if body.get("stream"):
            options = body.get("stream_options") or {}
            with_usage = bool(options.get("include_usage")) and self.profile.stream_usage
            chunks = self._chunks(
                completion_id,
                model,
                message,
                finish,
                usage if with_usage else None,
                rule,
                prompt_tokens,
            )
            return StreamingResponse(chunks, media_type="text/event-stream")
        return JSONResponse(
            {
                "id": completion_id,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )

    def _message(self, rule: Rule, text: str, role: Role, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message: scripted by the rule, or the default answer. JSON goes
        where it was asked for: in a forced tool call, or in the content."""
        message: dict[str, Any] = {"role": "assistant", "content": None}
        calls = list(rule.tool_calls or [])
        _, schema = schema_of(body)
        forced = _forced_tool(body)
        value = rule.json_reply
        reply = rule.reply
        adapted = self.cassette is None  # a recorded answer goes back as it came
        if adapted and role == "act" and routed(body):
            # The scripted call (or summary) as the one action asked for.
            if calls:
                value = {"tool": calls[0].name, "arguments": _arguments(calls[0])}
            elif reply is not None or value is None:
                said = reply if reply is not None else "[stand-in model] the step is done"
                value = {"tool": "done", "summary": said}
            calls, reply = [], None
        elif adapted and calls and forced is None and self.profile.tool_calls_as_text:
            reply = json.dumps({"name": calls[0].name, "arguments": _arguments(calls[0])})
            calls = []
        if reply is None and value is None and not calls:
            value = self._default_json(role, schema, body)
        if value is not None and forced is not None:
            calls.append(ScriptedToolCall(name=forced, arguments=json.dumps(value)))
            value = None
        if calls:
            message["tool_calls"] = [
                {
                    "id": f"call_{len(self.calls)}_{i}",
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": call.arguments
                        if isinstance(call.arguments, str)
                        else json.dumps(call.arguments),
                    },
                }
                for i, call in enumerate(calls)
            ]
        if reply is not None:
            message["content"] = reply
        elif value is not None:
            message["content"] = json.dumps(value)
        elif not calls:
            first_line = text.strip().splitlines()[-1] if text.strip() else ""
            message["content"] = f"[stand-in model] {first_line[:300]}"
        return message

    async def _chunks(
        self,
        completion_id: str,
        model: str,
        message: dict[str, Any],
        finish: str,
        usage: dict[str, int] | None,
        rule: Rule,
        prompt_tokens: int,
    ) -> AsyncIterator[str]:
        """The answer as Server-Sent Events, a few characters a chunk, as servers stream
        (at the profile's pace, if it has one)."""

        def event(choices: list[dict[str, Any]], **extra: Any) -> str:
            chunk = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
                **extra,
            }
            return f"data: {json.dumps(chunk)}\n\n"

        def delta(part: dict[str, Any], reason: str | None = None) -> str:
            return event([{"index": 0, "delta": part, "finish_reason": reason}])

        content = message.get("content") or ""
        # Each chunk with the tokens it writes.
        parts = [(delta({"role": "assistant"}), 0)]
        for i in range(0, len(content), 8):
            parts.append((delta({"content": content[i : i + 8]}), tokens_of(content[i : i + 8])))
        for i, call in enumerate(message.get("tool_calls") or []):
            written = tokens_of(call["function"]["arguments"])
            parts.append((delta({"tool_calls": [{"index": i, **call}]}), written))
        parts.append((delta({}, finish), 0))
        if usage is not None:
            parts.append((event([], usage=usage), 0))
        pace = self.profile
        self.generating += 1
        try:
            if pace.read_tps:
                await asyncio.sleep(prompt_tokens / pace.read_tps)
            for n, (part, written) in enumerate(parts):
                if rule.die_after_chunks is not None and n == rule.die_after_chunks:
                    raise ConnectionAbortedError("the stand-in dies mid-stream, as asked")
                if n and rule.chunk_delay_s:
                    await asyncio.sleep(rule.chunk_delay_s)
                if written and pace.write_tps:
                    await asyncio.sleep(written / pace.write_tps)
                yield part
            yield "data: [DONE]\n\n"
        finally:
            # Also when the caller goes away: a streaming server stops generating then.
            self.generating -= 1

    def _refusal(self, body: dict[str, Any], prompt_tokens: int) -> tuple[int, str] | None:
        """The error the profile's server gives a request it does not take, if any; the
        wording is the real server's, for the client to recognise."""
        profile = self.profile
        for i, tool in enumerate(body.get("tools") or []):
            name = str((tool.get("function") or {}).get("name"))
            if not _FUNCTION_NAME.fullmatch(name):  # OpenAI's rule for function names
                return 400, (
                    f"Invalid 'tools[{i}].function.name': string does not match pattern. "
                    "Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$'."
                )
        response_format = body.get("response_format")
        if (
            not profile.json_schema
            and isinstance(response_format, dict)
            and response_format.get("type") == "json_schema"
        ):
            return 500, (
                "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', "
                "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                "'json_object'\", 'input': 'json_schema'}"
            )
        for i, message in enumerate(body.get("messages") or []):
            if not profile.null_content and "content" in message and message["content"] is None:
                return 500, (
                    f"1 validation error:\n  {{'type': 'string_type', 'loc': ('body', "
                    f"'messages', {i}, 'content'), 'msg': 'Input should be a valid string'}}"
                )
        if not profile.grammar_limits:
            _, schema = schema_of(body)
            schemas = [schema, *[t.get("function", {}) for t in body.get("tools") or []]]
            if any(k in json.dumps(sub) for sub in schemas if sub for k in _GRAMMAR_KEYWORDS):
                return 500, "failed to parse grammar"
        asked = body.get("max_tokens")
        if profile.max_answer is not None and isinstance(asked, int) and asked > profile.max_answer:
            return 400, (
                f"max_tokens is too large: {asked}. This model supports at most "
                f"{profile.max_answer} completion tokens, whereas you provided {asked}."
            )
        window = profile.context_window
        wanted = prompt_tokens + int(body.get("max_tokens") or 0)
        if window is not None and wanted > window:
            return 400, f"Requested tokens ({wanted}) exceed context window of {window}"
        return None

    @staticmethod
    def _default_json(role: Role, schema: dict[str, Any] | None, body: dict[str, Any]) -> Any:
        if role == "judge":
            return {
                "quote": _first_tool_result(body),
                "passed": True,
                "reason": "[stand-in judge] accepted unchecked: no real model",
            }
        if schema is not None:
            return example_of(schema)
        return None


def _role_only(model: str) -> Iterator[str]:
    """A stream that says who speaks and ends: no content, no reason it ended."""
    chunk = {
        "id": "chatcmpl-empty",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}],
    }
    yield f"data: {json.dumps(chunk)}\n\n"
    yield "data: [DONE]\n\n"


def load_scenario(path: Path) -> list[Rule]:
    """The rules of a scenario file: a JSON list of rules."""
    return TypeAdapter(list[Rule]).validate_json(path.read_bytes())


def create_app(
    scenarios: list[Path] | None = None, profile: str = "openai", cassette: Path | None = None
) -> FastAPI:
    """The stand-in as an ASGI app, with the rules of `scenarios` loaded, or answering
    from a `cassette`."""
    app = FastAPI(title="longrun model stand-in", docs_url=None, redoc_url=None)
    state = StandIn(PROFILES[profile])
    for path in scenarios or []:
        state.rules.extend(load_scenario(path))
    if cassette is not None:
        state.play(Cassette.model_validate_json(cassette.read_bytes()))
    app.state.standin = state

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        """OpenAI Chat Completions, answered by rule or deterministically."""
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "body is not JSON"}}, status_code=400)
        if not isinstance(body, dict):
            return JSONResponse({"error": {"message": "body must be an object"}}, status_code=400)
        return await state.complete(body)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        """The one model the stand-in serves (it answers to any name)."""
        return {"object": "list", "data": [{"id": STANDIN_MODEL, "object": "model"}]}

    @app.put("/_standin/cassette")
    async def set_cassette(cassette: Cassette) -> dict[str, Any]:
        """Answer from a recorded run's calls (until the next reset)."""
        state.play(cassette)
        return {"entries": len(cassette.entries), "profile": state.profile.name}

    @app.put("/_standin/profile")
    async def set_profile(profile: Profile) -> Profile:
        """Behave as another kind of server (until the next reset)."""
        state.profile = profile
        return profile

    @app.get("/_standin/state")
    async def generating() -> dict[str, Any]:
        """The profile, and how many answers are being generated right now."""
        return {"profile": state.profile.model_dump(), "generating": state.generating}

    @app.post("/_standin/rules", status_code=201)
    async def add_rules(rules: Rule | list[Rule]) -> dict[str, int]:
        """Append scripted rules (one, or a scenario's list); rules are tried in order."""
        state.rules.extend(rules if isinstance(rules, list) else [rules])
        return {"rules": len(state.rules)}

    @app.delete("/_standin/rules", status_code=204)
    async def reset(seed: str = "0") -> None:
        """Forget every rule and every recorded call, and reseed probabilistic rules."""
        state.reset(seed)

    @app.get("/_standin/calls")
    async def calls(match: str | None = None, role: Role | None = None) -> list[Call]:
        """Calls received so far, optionally only those of a role or containing `match`."""
        return [
            c
            for c in state.calls
            if (match is None or match in _text_of(c.messages)) and role in (None, c.role)
        ]

    return app


def main(argv: list[str] | None = None) -> None:
    """Serve the stand-in: `longrun standin --port 8100`."""
    parser = argparse.ArgumentParser(prog="longrun standin", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--scenario", type=Path, action="append", help="a JSON file of rules")
    parser.add_argument("--profile", choices=sorted(PROFILES), default="openai")
    parser.add_argument("--cassette", type=Path, help="answer from a recorded run's calls")
    args = parser.parse_args(argv)
    app = create_app(args.scenario, args.profile, args.cassette)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
