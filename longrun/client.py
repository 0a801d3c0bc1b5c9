"""A client of longrun's REST API, as the `longrun` command uses it: where the API is
(`LONGRUN_API_URL`), the caller's key (`LONGRUN_API_KEY`), and exit codes scripts can
rely on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx

DEFAULT_API_URL = "http://127.0.0.1:8000"

# Exit codes of the `longrun` command.
EXIT_COMPLETED = 0  # the run completed, or the request was taken
EXIT_FAILED = 1  # the run failed
EXIT_USAGE = 2  # the command line was wrong
EXIT_CANCELLED = 3  # the run was cancelled
EXIT_WAITING = 4  # the run waits for a person: an approval, or a resume
EXIT_UNREACHABLE = 5  # the API (or Temporal behind it) did not answer
EXIT_REFUSED = 6  # the API refused the request (unknown run, bad input, conflict, key)
EXIT_RUNNING = 7  # the run is still running

BY_STATUS = {
    "completed": EXIT_COMPLETED,
    "failed": EXIT_FAILED,
    "cancelled": EXIT_CANCELLED,
    "waiting_approval": EXIT_WAITING,
    "paused": EXIT_WAITING,
    "running": EXIT_RUNNING,
}


class ApiError(Exception):
    """A request that did not succeed, with the exit code it means and what to tell."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Api:
    """longrun's API at `url`, called with `key` when given."""

    def __init__(self, url: str, key: str | None, timeout_s: float = 30.0) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def close(self) -> None:
        """Close the connections."""
        self._http.close()

    def get(self, path: str, **params: Any) -> Any:
        """GET `path`; its JSON."""
        query = {k: v for k, v in params.items() if v is not None}
        return self._send("GET", path, params=query)

    def post(self, path: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
        """POST `body` as JSON to `path`; the answer's JSON."""
        return self._send("POST", path, json=body, headers=headers)

    def events(self, run_id: str, after: int = 0) -> Iterator[dict[str, Any]]:
        """The run's events after `after` as they happen (Server-Sent Events), until the
        stream closes; each is `{"id", "type", "data"}` with `data` the event as JSON text."""
        path = f"/v1/runs/{run_id}/events"
        try:
            with self._http.stream(
                "GET", path, headers={"Last-Event-ID": str(after)}, timeout=None
            ) as response:
                if response.status_code != 200:
                    response.read()
                    raise _refusal(response)
                yield from _parse(response.iter_lines())
        except httpx.TransportError as exc:
            raise ApiError(EXIT_UNREACHABLE, self._unreachable(exc)) from None

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(EXIT_UNREACHABLE, self._unreachable(exc)) from None
        if response.status_code >= 400:
            raise _refusal(response)
        return response.json()

    def _unreachable(self, exc: Exception) -> str:
        return (
            f"the longrun API at {self.url} did not answer ({exc}); "
            "is it running? (LONGRUN_API_URL)"
        )


def _refusal(response: httpx.Response) -> ApiError:
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text[:500]
    if isinstance(detail, list):  # a 422's list of problems
        detail = "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail
        )
    code = EXIT_UNREACHABLE if response.status_code >= 500 else EXIT_REFUSED
    return ApiError(code, f"{response.status_code}: {detail}")


def _parse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Server-Sent Events from the lines of a stream (comments and pings skipped)."""
    event: dict[str, Any] = {}
    for line in lines:
        if not line:
            if "data" in event:
                yield {
                    "id": int(event.get("id", 0)),
                    "type": event.get("event"),
                    "data": event["data"],
                }
            event = {}
            continue
        field, _, value = line.partition(":")
        if field in ("id", "event", "data"):
            event[field] = value.removeprefix(" ")
