"""longrun as an MCP server: tools that hand a long job to longrun and follow it, for any
agent that speaks the Model Context Protocol.

Every tool is a call of longrun's REST API with the caller's key, so keys, roles, the
four-eyes rule and the audit trail apply exactly as to any other client. `longrun mcp`
serves them over stdio (the key from `LONGRUN_API_KEY`); the API serves them at `/mcp`
(streamable HTTP), calling itself with the key the MCP client sent.
"""

from __future__ import annotations

import logging
from typing import Any, Literal
from urllib.parse import quote

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

INSTRUCTIONS = (
    "longrun runs long jobs durably: submit a run (a goal, or an explicit plan of steps), "
    "then follow it with run_status and run_events. Steps that need a person wait for an "
    "approval: list_approvals shows them and decide_approval answers one, if your key may."
)
EVENTS_WAIT_S = 5.0
EVENTS_MAX = 500


class LongrunApi:
    """The REST API, called with the key of whoever asks: `key`, or the bearer token of
    the MCP request being served."""

    def __init__(
        self, url: str, key: str | None, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._http = httpx.AsyncClient(base_url=url.rstrip("/"), transport=transport, timeout=60)
        self._key = key

    def _unreachable(self, exc: Exception) -> ToolError:
        return ToolError(f"the longrun API at {self._http.base_url} did not answer: {exc}")

    def _headers(self, ctx: Context | None, extra: dict[str, str] | None = None) -> dict[str, str]:
        headers = dict(extra or {})
        sent = (ctx.headers or {}) if ctx is not None else {}
        auth = sent.get("authorization") or (f"Bearer {self._key}" if self._key else None)
        if auth:
            headers["Authorization"] = auth
        return headers

    async def call(
        self,
        ctx: Context | None,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """One API call; its JSON, or a ToolError saying what the API refused."""
        try:
            response = await self._http.request(
                method, path, json=body, headers=self._headers(ctx, headers)
            )
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        if response.status_code >= 400:
            raise ToolError(f"{response.status_code}: {_detail(response)}")
        return response.json() if response.content else None

    async def events(
        self, ctx: Context | None, run_id: str, after: int, wait_s: float, limit: int
    ) -> dict[str, Any]:
        """The run's events after `after`, waiting up to `wait_s` for the first (a long
        poll of `/events/page`), and whether the run has ended."""
        query = f"?after={after}&wait_s={wait_s:g}&limit={limit}"
        page: dict[str, Any] = await self.call(ctx, "GET", f"{_run(run_id)}/events/page{query}")
        return page


def _run(run_id: str) -> str:
    """The API path of a run, whatever the caller wrote as its id."""
    return f"/v1/runs/{quote(run_id, safe='')}"


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except ValueError:
        return response.text[:500]
    if isinstance(detail, list):  # a 422's list of problems
        return "; ".join(
            f"{'.'.join(str(p) for p in d.get('loc', []))}: {d.get('msg')}" for d in detail
        )
    return str(detail)


def _status(run: dict[str, Any]) -> dict[str, Any]:
    """What an agent following a run needs of its status."""
    steps = run.get("steps") or []
    return {
        "run_id": run["run_id"],
        "status": run["status"],
        "goal": run.get("goal"),
        "steps_done": sum(1 for s in steps if s.get("status") in ("completed", "skipped")),
        "steps_total": len(steps),
        "steps": [{"id": s["id"], "status": s["status"]} for s in steps[-50:]],
        "pending_approvals": run.get("pending_approvals") or [],
        "result": run.get("result"),
        "error": run.get("error"),
        "usage": run.get("usage"),
        "links": run.get("links"),
    }


def build_server(api: LongrunApi) -> MCPServer:
    """The MCP server whose tools call longrun's API through `api`."""
    # MCPServer configures the root logger when built (basicConfig at INFO with its own
    # handler); the process hosting it keeps the logging it had.
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server = MCPServer("longrun", instructions=INSTRUCTIONS, log_level="WARNING")
    root.handlers[:], root.level = handlers, level

    @server.tool()
    async def submit_run(
        ctx: Context,
        goal: str,
        plan: dict[str, Any] | None = None,
        acceptance: list[dict[str, Any]] | None = None,
        tools: list[str] | None = None,
        labels: dict[str, str] | None = None,
        budget: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Start a run: a goal the agent plans itself (optionally with acceptance criteria and
        the tools it may use), or an explicit plan ({"steps": [...]}, as POST /v1/runs takes
        it). Returns its run_id; follow it with run_status and run_events."""
        body: dict[str, Any] = {"goal": goal}
        optional = {"plan": plan, "acceptance": acceptance, "tools": tools, "labels": labels}
        body |= {k: v for k, v in (optional | {"budget": budget}).items() if v is not None}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        created: dict[str, Any] = await api.call(ctx, "POST", "/v1/runs", body, headers)
        return created

    @server.tool()
    async def run_status(ctx: Context, run_id: str) -> dict[str, Any]:
        """Where a run stands: its status, steps done, approvals waiting, result or error."""
        return _status(await api.call(ctx, "GET", _run(run_id)))

    @server.tool()
    async def run_events(
        ctx: Context, run_id: str, after: int = 0, wait_s: float = EVENTS_WAIT_S, limit: int = 100
    ) -> dict[str, Any]:
        """The run's events after event id `after` (0: from its start), waiting up to
        `wait_s` seconds (at most 30) for new ones. Call again with `next_after` to follow;
        `ended` says the run is over."""
        wait = min(max(wait_s, 0.1), 30.0)
        return await api.events(ctx, run_id, max(after, 0), wait, min(max(limit, 1), EVENTS_MAX))

    @server.tool()
    async def list_approvals(ctx: Context) -> dict[str, Any]:
        """Approvals waiting for a person, across runs, oldest first."""
        found: dict[str, Any] = await api.call(ctx, "GET", "/v1/approvals")
        return found

    @server.tool()
    async def decide_approval(
        ctx: Context,
        run_id: str,
        approval_id: str,
        decision: Literal["approve", "reject"],
        comment: str | None = None,
    ) -> dict[str, Any]:
        """Approve or reject one approval a run waits for (needs the approver role)."""
        body = {"decision": decision} | ({"comment": comment} if comment else {})
        path = f"{_run(run_id)}/approvals/{quote(approval_id, safe='')}"
        taken: dict[str, Any] = await api.call(ctx, "POST", path, body)
        return taken

    @server.tool()
    async def cancel_run(ctx: Context, run_id: str, compensate: bool = False) -> dict[str, Any]:
        """Cancel a run; with `compensate`, its completed reversible steps are undone."""
        body = {"compensate": compensate}
        taken: dict[str, Any] = await api.call(ctx, "POST", f"{_run(run_id)}/cancel", body)
        return taken

    return server


def serve_stdio(url: str, key: str | None) -> None:
    """Serve the tools over stdio until the client closes it (`longrun mcp`)."""
    build_server(LongrunApi(url, key)).run("stdio")
