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
import threading
import time
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, Field

STANDIN_MODEL = "standin-1"


class Rule(BaseModel):
    """A scripted answer for calls whose messages contain `match` (every call if unset)."""

    match: str | None = None
    times: int | None = Field(None, ge=1, description="apply this many times; unset = always")
    reply: str | None = None
    json_reply: Any = Field(None, alias="json")
    status: int | None = Field(None, ge=400, le=599)
    retry_after: float | None = Field(None, ge=0)
    message: str = "injected fault"
    delay_s: float = Field(0.0, ge=0, le=600)
    malformed: bool = False


class Call(BaseModel):
    """One request the stand-in received and what it answered."""

    model: str
    messages: list[dict[str, Any]]
    outcome: str
    at: float = Field(description="arrival, seconds since the epoch")


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


def _text_of(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages)


class StandIn:
    """State of one stand-in server: its rules and the calls it has answered."""

    def __init__(self) -> None:
        self.rules: list[Rule] = []
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def _take_rule(self, text: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.match is None or rule.match in text:
                    if rule.times is not None:
                        rule.times -= 1
                        if rule.times == 0:
                            self.rules.remove(rule)
                    return rule
        return None

    def _record(self, model: str, messages: list[dict[str, Any]], outcome: str) -> None:
        with self._lock:
            self.calls.append(Call(model=model, messages=messages, outcome=outcome, at=time.time()))

    async def complete(self, body: dict[str, Any]) -> Response:
        messages = body.get("messages")
        model = body.get("model")
        if not isinstance(messages, list) or not messages or not isinstance(model, str):
            return JSONResponse(
                {"error": {"message": "'model' and a non-empty 'messages' list are required"}},
                status_code=400,
            )
        text = _text_of(messages)
        rule = self._take_rule(text) or Rule()
        # Recorded on arrival: a caller that times out on a slow answer still made the call.
        if rule.malformed:
            outcome = "malformed"
        elif rule.status:
            outcome = str(rule.status)
        else:
            outcome = "ok"
        self._record(model, messages, outcome)
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
        if rule.reply is not None:
            content = rule.reply
        elif rule.json_reply is not None:
            content = json.dumps(rule.json_reply)
        else:
            content = self._default_reply(text, body.get("response_format"))
        digest = hashlib.sha256(text.encode()).hexdigest()[:24]
        prompt_tokens = max(1, len(text) // 4)
        completion_tokens = max(1, len(content) // 4)
        return JSONResponse(
            {
                "id": f"chatcmpl-{digest}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
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
    def _default_reply(text: str, response_format: Any) -> str:
        if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
            schema = response_format.get("json_schema", {}).get("schema", {})
            return json.dumps(example_of(schema))
        first_line = text.strip().splitlines()[-1] if text.strip() else ""
        return f"[stand-in model] {first_line[:300]}"


def create_app() -> FastAPI:
    """The stand-in as an ASGI app."""
    app = FastAPI(title="longrun model stand-in", docs_url=None, redoc_url=None)
    state = StandIn()
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
    async def add_rule(rule: Rule) -> dict[str, int]:
        """Append a scripted rule; rules are tried in order."""
        state.rules.append(rule)
        return {"rules": len(state.rules)}

    @app.delete("/_standin/rules", status_code=204)
    async def reset() -> None:
        """Forget every rule and every recorded call."""
        state.rules.clear()
        state.calls.clear()

    @app.get("/_standin/calls")
    async def calls(match: str | None = None) -> list[Call]:
        """Calls received so far, optionally only those whose messages contain `match`."""
        return [c for c in state.calls if match is None or match in _text_of(c.messages)]

    return app


def main(argv: list[str] | None = None) -> None:
    """Serve the stand-in: `longrun standin --port 8100`."""
    parser = argparse.ArgumentParser(prog="longrun standin", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    args = parser.parse_args(argv)
    uvicorn.run(create_app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
