"""An OpenAI-compatible stand-in model server for offline use and tests.

It answers `POST /v1/chat/completions` deterministically. Tests script it over HTTP with
rules that match on the prompt text and inject replies or faults (an error status with
Retry-After, slow answers, malformed JSON); `GET /_standin/calls` lists what it received.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import threading
import time
from pathlib import Path
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field, TypeAdapter

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


class Call(BaseModel):
    """One request the stand-in received and what it answered."""

    model: str
    role: Role
    messages: list[dict[str, Any]]
    tools: list[str] = Field(default_factory=list, description="names of the tools offered")
    outcome: str
    at: float = Field(description="arrival, seconds since the epoch")
    prompt_tokens: int = Field(0, description="the prompt's size as the answer's usage gives it")


def example_of(schema: dict[str, Any]) -> Any:
    """A small value that satisfies a simple JSON schema."""
    if "enum" in schema:
        return schema["enum"][0]
    if "const" in schema:
        return schema["const"]
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: example_of(sub) for name, sub in props.items()}
    if kind == "array":
        return [example_of(schema["items"])] if schema.get("minItems") and "items" in schema else []
    return {"string": "stand-in", "integer": 0, "number": 0, "boolean": False}.get(kind)


def role_of(body: dict[str, Any]) -> Role:
    """Which of longrun's roles a request comes from, told by its shape."""
    if body.get("tools"):
        return "act"
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        name = (response_format.get("json_schema") or {}).get("name")
        if name == "plan":
            return "plan"
        if name == "verdict":
            return "judge"
    return "complete"


def tokens_of(text: str) -> int:
    """The stand-in's token count: about four characters a token, as for English text."""
    return max(1, len(text) // 4)


def _text_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


class StandIn:
    """State of one stand-in server: its rules and the calls it has answered."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.calls: list[Call] = []
        self._lock = threading.Lock()
        self.reset()

    def reset(self, seed: str = "0") -> None:
        """Forget rules and calls; reseed the draws of rules with a `probability`."""
        with self._lock:
            self.rules.clear()
            self.calls.clear()
            self._random = random.Random(seed)  # seeded: fault injection repeats run to run

    def _take_rule(self, text: str, role: Role) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.role not in (None, role):
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
        call = Call(
            model=body["model"],
            role=role,
            messages=body["messages"],
            tools=tools,
            outcome=outcome,
            at=time.time(),
            prompt_tokens=tokens,
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
        rule = self._take_rule(text, role) or Rule()
        # Recorded on arrival: a caller that times out on a slow answer still made the call.
        if rule.malformed:
            outcome = "malformed"
        elif rule.status:
            outcome = str(rule.status)
        else:
            outcome = "ok"
        self._record(body, role, outcome, prompt_tokens)
        if rule.delay_s:
            await asyncio.sleep(rule.delay_s)
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
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if rule.tool_calls:
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
                for i, call in enumerate(rule.tool_calls)
            ]
        if rule.reply is not None:
            message["content"] = rule.reply
        elif rule.json_reply is not None:
            message["content"] = json.dumps(rule.json_reply)
        elif not rule.tool_calls:
            message["content"] = self._default_reply(text, role, body.get("response_format"))
        content = message["content"] or ""
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        completion_tokens = tokens_of(content)
        return JSONResponse(
            {
                "id": f"chatcmpl-{digest}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": "tool_calls" if rule.tool_calls else "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            }
        )

    @staticmethod
    def _default_reply(text: str, role: Role, response_format: Any) -> str:
        if role == "judge":
            return json.dumps(
                {"passed": True, "reason": "[stand-in judge] accepted unchecked: no real model"}
            )
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            schema = response_format.get("json_schema", {}).get("schema", {})
            return json.dumps(example_of(schema))
        first_line = text.strip().splitlines()[-1] if text.strip() else ""
        return f"[stand-in model] {first_line[:300]}"


def load_scenario(path: Path) -> list[Rule]:
    """The rules of a scenario file: a JSON list of rules."""
    return TypeAdapter(list[Rule]).validate_json(path.read_bytes())


def create_app(scenarios: list[Path] | None = None) -> FastAPI:
    """The stand-in as an ASGI app, with the rules of `scenarios` loaded."""
    app = FastAPI(title="longrun model stand-in", docs_url=None, redoc_url=None)
    state = StandIn()
    for path in scenarios or []:
        state.rules.extend(load_scenario(path))
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
    args = parser.parse_args(argv)
    app = create_app(args.scenario)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
