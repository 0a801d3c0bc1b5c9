"""`longrun conformance`: what the model server in settings (OPENAI_BASE_URL, LONGRUN_MODEL)
can do, checked call by call and printed as a table; with `--runs`, also the guide's plan
example and the demo goal through a running API.

Each row is one real call through the same code the activities use (activities/endpoint),
so what passes here is what a run will get.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
from temporalio.exceptions import ApplicationError

from activities import structured
from activities.endpoint import ContextExceeded, Endpoint, Refused
from longrun.dev.demo import run_demo
from longrun.settings import Settings

CITY = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 60}, "temperature": {"type": "number"}},
    "required": ["city", "temperature"],
}
TOOL = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string", "maxLength": 1024}},
            "required": ["path"],
        },
    },
}
GUIDE_PLAN: dict[str, Any] = {
    "goal": "Check the model server and publish a report",
    "plan": {
        "steps": [
            {"id": "fetch", "tool": "http_request", "args": {"url": "{models}"}},
            {
                "id": "summarize",
                "model": {"prompt": "Summarize this list of models: {{steps.fetch.output.body}}"},
            },
            {
                "id": "city",
                "model": {"prompt": "Name a city and its temperature.", "json_schema": CITY},
            },
        ]
    },
    "labels": {"check": "conformance"},
}
Row = tuple[str, str, str]  # what, result, detail


async def check_endpoint(settings: Settings) -> list[Row]:
    """One row per capability of the server in `settings`."""
    model = settings.model
    rows: list[Row] = []

    async def row(what: str, check: Callable[[Endpoint], Awaitable[tuple[str, str]]]) -> None:
        endpoint = Endpoint(settings)
        started = time.monotonic()
        try:
            result, detail = await check(endpoint)
        except (ApplicationError, Refused, ContextExceeded) as exc:
            result, detail = "fails", str(exc)[:160]
        finally:
            await endpoint.aclose()
        rows.append((what, result, f"{detail} ({time.monotonic() - started:.1f} s)"))

    async def served(e: Endpoint) -> tuple[str, str]:
        models = await e.models()
        if model in models:
            return "ok", f"serves '{model}'"
        return "warn", f"'{model}' not listed; served: {', '.join(sorted(models)) or '(none)'}"

    async def plain(e: Endpoint) -> tuple[str, str]:
        answer = await e.chat(model, [{"role": "user", "content": "Say OK."}], max_tokens=16)
        return ("ok" if answer.content else "empty"), repr((answer.content or "")[:40])

    def usage_of(streamed: bool) -> Callable[[Endpoint], Awaitable[tuple[str, str]]]:
        async def usage(e: Endpoint) -> tuple[str, str]:
            e.streaming = streamed
            answer = await e.chat(model, [{"role": "user", "content": "Say OK."}], max_tokens=8)
            u = answer.usage
            how = "reported" if answer.usage_reported else "estimated (not reported)"
            return ("ok" if answer.usage_reported else "warn"), (
                f"{how}: {u.input_tokens} in, {u.output_tokens} out"
            )

        return usage

    def structured_by(
        mode: structured.Mode | None,
    ) -> Callable[[Endpoint], Awaitable[tuple[str, str]]]:
        async def ask(e: Endpoint) -> tuple[str, str]:
            e.fixed_mode = mode  # None: as settings say (`auto` falls back)
            text, _ = await e.structured(
                model,
                [{"role": "user", "content": "Name a city and its temperature, as JSON."}],
                name="city",
                schema=CITY,
                max_tokens=64,
            )
            try:
                value = structured.parse_json(text)
            except ValueError as exc:
                return "invalid", str(exc)[:100]
            problem = structured.problems(value, CITY)
            if problem is not None:
                return "invalid", problem[:100]
            return "ok", (f"uses {e.mode(model)}: " if mode is None else "") + repr(value)[:80]

        return ask

    async def tool_call(e: Endpoint) -> tuple[str, str]:
        answer = await e.chat(
            model,
            [{"role": "user", "content": "Read the file notes.txt with the read_file tool."}],
            max_tokens=64,
            tools=[TOOL],
        )
        if answer.tool_calls:
            call = answer.tool_calls[0]
            return "ok", f"{call.name}({call.arguments[:60]})"
        return "no call", f"answered in text: {(answer.content or '')[:60]!r}"

    async def window(e: Endpoint) -> tuple[str, str]:
        known = await e.window(model)
        if known is not None:
            return "ok", f"{known} tokens (settings or model list)"
        try:  # a prompt longer than any small window: the server's error names its size
            await e.call(model, [{"role": "user", "content": "hi " * 20_000}], max_tokens=1)
        except ContextExceeded as exc:
            if exc.window is not None:
                return "ok", f"{exc.window} tokens (from the server's error)"
        return "unknown", "set LONGRUN_CONTEXT_WINDOWS"

    await row("model listed", served)
    await row("plain completion", plain)
    await row("usage, whole answer", usage_of(streamed=False))
    await row("streaming + usage", usage_of(streamed=True))
    for mode in structured.MODES:
        await row(f"structured: {mode}", structured_by(mode))
    await row("structured: auto", structured_by(None))
    await row("tool call", tool_call)
    await row("context window", window)
    return rows


def check_runs(api_url: str, models_url: str) -> list[Row]:
    """The guide's plan example (with a structured step) and the demo goal, through the
    API: how each ended."""
    rows: list[Row] = []
    with httpx.Client(base_url=api_url, timeout=30) as http:
        body = GUIDE_PLAN | {"plan": _fetching(GUIDE_PLAN["plan"], models_url)}
        started = time.monotonic()
        created = http.post("/v1/runs", json=body)
        if created.status_code != 202:
            return [("README plan", "fails", f"{created.status_code} {created.text[:120]}")]
        run = _follow(http, created.json()["run_id"])
        detail = run.get("error") or ", ".join(f"{s['id']} {s['status']}" for s in run["steps"])
        took = time.monotonic() - started
        rows.append(("README plan", run["status"], f"{detail[:140]} ({took:.0f} s)"))
    started = time.monotonic()
    code = run_demo(api_url, approve=True, timeout_s=900)
    took = time.monotonic() - started
    rows.append(("demo goal", "completed" if code == 0 else "ended", f"see above ({took:.0f} s)"))
    return rows


def _fetching(plan: dict[str, Any], url: str) -> dict[str, Any]:
    steps = [dict(s) for s in plan["steps"]]
    steps[0] = {**steps[0], "args": {"url": url}}
    return {"steps": steps}


def _follow(http: httpx.Client, run_id: str, timeout_s: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        run = http.get(f"/v1/runs/{run_id}").json()
        if run.get("status") in ("completed", "failed", "cancelled"):
            break
        time.sleep(1)
    return run


def table(rows: list[Row]) -> str:
    """Rows as an aligned text table."""
    width = [max(len(r[i]) for r in rows) for i in range(2)]
    lines = [f"{'check':<{width[0]}}  {'result':<{width[1]}}  detail"]
    lines += [f"{a:<{width[0]}}  {b:<{width[1]}}  {c}" for a, b, c in rows]
    return "\n".join(lines) + "\n"


def main(settings: Settings, *, runs: bool) -> int:
    """Check the endpoint (and, with `runs`, the example runs); 1 if plain completion fails."""
    sys.stdout.write(
        f"model server {settings.openai_base_url or 'OpenAI'}, model {settings.model}\n"
    )
    rows = asyncio.run(check_endpoint(settings))
    sys.stdout.write(table(rows))
    if runs:
        api_url = f"http://{settings.api_host}:{settings.api_port}"
        sys.stdout.write(f"\nruns through {api_url}:\n")
        base = (settings.openai_base_url or "https://api.openai.com/v1").rstrip("/")
        sys.stdout.write(table(check_runs(api_url, f"{base}/models")))
    return 0 if dict((r[0], r[1]) for r in rows).get("plain completion") == "ok" else 1
