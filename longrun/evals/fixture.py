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
from pydantic import BaseModel, Field

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


class Report(BaseModel):
    """What the fixture saw."""

    requests: dict[str, int] = Field(description="requests received, by 'METHOD /path'")
    effects: list[Effect] = Field(description="effects applied, oldest first")
    absorbed: int = Field(description="requests with a key already applied: answered, not applied")
    applied_twice: int = Field(
        description="effects applied again for the same run under another key"
    )


class Fixture:
    """The fixture's state, shared by its handlers (which run on the server's thread) and
    the scorer that reads it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.effects: list[Effect] = []
        self._by_key: dict[str, dict[str, Any]] = {}
        self.absorbed = 0

    def report(self) -> Report:
        """What the fixture saw so far."""
        with self._lock:
            seen: Counter[tuple[str, str, str]] = Counter()
            for effect in self.effects:
                run = (effect.key or "").partition(":")[0]
                seen[(run, effect.name, json.dumps(effect.body, sort_keys=True))] += 1
            return Report(
                requests=dict(self.requests),
                effects=list(self.effects),
                absorbed=self.absorbed,
                applied_twice=sum(n - 1 for n in seen.values()),
            )

    def reset(self) -> None:
        """Forget everything seen."""
        with self._lock:
            self.requests.clear()
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

    def count(self, method: str, path: str) -> None:
        with self._lock:
            self.requests[f"{method} {path}"] += 1


def fixture_app(fixture: Fixture) -> FastAPI:
    """The fixture's HTTP face."""
    app = FastAPI(title="longrun eval fixture")

    @app.middleware("http")
    async def counted(request: Request, call_next: Any) -> Any:
        if not request.url.path.startswith("/_fixture"):
            fixture.count(request.method, request.url.path)
        return await call_next(request)

    @app.get("/data/{name}")
    async def data(name: str) -> Any:
        """A fixed data set by name."""
        if name not in DATA:
            return {"error": f"no data '{name}'; there is {', '.join(DATA)}"}
        return DATA[name]

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
