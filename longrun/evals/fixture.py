"""The eval's fixture server: the outside world a task's runs call. It serves data, applies
effects (once per `Idempotency-Key`, as a careful API does) and counts every request, so a
checker can see what a run really did and the scorer can count an effect applied twice:
the same effect of the same run applied under two different keys."""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

FLAKY_FAILURES = 2  # of each key's requests to /flaky/{name}, answered 503
# What GET /data/{name} serves: small, fixed facts tasks compute with.
DATA: dict[str, Any] = {
    "prices": {"apple": 3, "pear": 5, "plum": 7, "fig": 11},
    "inventory": {"apple": 4, "pear": 0, "plum": 2, "fig": 9},
    "numbers": [12, 7, 30, 5, 16],
    "users": [
        {"name": "ada", "team": "core", "active": True},
        {"name": "bo", "team": "ops", "active": False},
        {"name": "cy", "team": "core", "active": True},
    ],
    "motd": {"message": "hello from the fixture"},
}


class Effect(BaseModel):
    """An effect the fixture applied."""

    name: str
    body: Any
    key: str | None

    @property
    def run_id(self) -> str:
        """The run whose call applied it: a tool call's key is `<run_id>:<step_id>`."""
        return (self.key or "").partition(":")[0]


def applied_twice(effects: list[Effect]) -> int:
    """Effects applied again for the same run (same name and body) under another key."""
    seen = Counter((e.run_id, e.name, json.dumps(e.body, sort_keys=True)) for e in effects)
    return sum(n - 1 for n in seen.values())


class Report(BaseModel):
    """What the fixture saw."""

    requests: dict[str, int] = Field(description="requests received, by 'METHOD /path'")
    by_run: dict[str, dict[str, int]] = Field(
        description="of those, the ones a run's tool call sent (by its Idempotency-Key), by run"
    )
    effects: list[Effect] = Field(description="effects applied, oldest first")
    absorbed: int = Field(description="requests with a key already applied: answered, not applied")
    applied_twice: int = Field(
        description="effects applied again for the same run under another key"
    )

    def twice_among(self, runs: set[str]) -> int:
        """Of `applied_twice`, those of these runs."""
        return applied_twice([e for e in self.effects if e.run_id in runs])


class Fixture:
    """The fixture's state, shared by its handlers (which run on the server's thread) and
    the scorer that reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.by_run: dict[str, Counter[str]] = {}
        self._flaky: Counter[str] = Counter()
        self.effects: list[Effect] = []
        self._by_key: dict[str, dict[str, Any]] = {}
        self.absorbed = 0

    def report(self) -> Report:
        """What the fixture saw so far."""
        with self._lock:
            return Report(
                requests=dict(self.requests),
                by_run={run: dict(counts) for run, counts in self.by_run.items()},
                effects=list(self.effects),
                absorbed=self.absorbed,
                applied_twice=applied_twice(self.effects),
            )

    def reset(self) -> None:
        """Forget everything seen."""
        with self._lock:
            self.requests.clear()
            self.by_run.clear()
            self._flaky.clear()
            self.effects.clear()
            self._by_key.clear()
            self.absorbed = 0

    def apply(self, name: str, body: Any, key: str | None) -> dict[str, Any]:
        """Apply an effect, unless its key was applied already: then answer as then."""
        with self._lock:
            if key is not None and key in self._by_key:
                self.absorbed += 1
                return self._by_key[key]
            self.effects.append(Effect(name=name, body=body, key=key))
            answer = {"applied": True, "effect": name, "number": len(self.effects)}
            if key is not None:
                self._by_key[key] = answer
            return answer

    def count(self, method: str, path: str, key: str | None) -> None:
        """Count a request (and for the run whose key it carries)."""
        with self._lock:
            self.requests[f"{method} {path}"] += 1
            if key:
                run = key.partition(":")[0]
                self.by_run.setdefault(run, Counter())[f"{method} {path}"] += 1

    def fails_first(self, name: str, key: str | None, times: int) -> bool:
        """Whether this request of a flaky resource fails: the first `times` of each key."""
        with self._lock:
            self._flaky[f"{name}\n{key}"] += 1
            return self._flaky[f"{name}\n{key}"] <= times


def fixture_app(fixture: Fixture) -> FastAPI:
    """The fixture's HTTP face."""
    app = FastAPI(title="longrun eval fixture")

    @app.middleware("http")
    async def counted(request: Request, call_next: Any) -> Any:
        if not request.url.path.startswith("/_fixture"):
            key = request.headers.get("idempotency-key")
            fixture.count(request.method, request.url.path, key)
        return await call_next(request)

    @app.get("/data/{name}")
    async def data(name: str) -> Any:
        """A fixed data set by name."""
        if name not in DATA:
            return {"error": f"no data '{name}'; there is {', '.join(DATA)}"}
        return DATA[name]

    @app.get("/flaky/{name}")
    async def flaky(name: str, idempotency_key: str | None = Header(None)) -> Any:
        """A data set that answers 503 to the first two requests of each key."""
        if fixture.fails_first(name, idempotency_key, FLAKY_FAILURES):
            return JSONResponse({"error": "try again"}, status_code=503)
        return await data(name)

    @app.post("/effects/{name}")
    async def effect(
        name: str, request: Request, idempotency_key: str | None = Header(None)
    ) -> dict[str, Any]:
        """Apply an effect (the body, as JSON or text), once per Idempotency-Key."""
        raw = await request.body()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode(errors="replace")
        return fixture.apply(name, body, idempotency_key)

    @app.get("/_fixture/report")
    async def report() -> Report:
        return fixture.report()

    return app
