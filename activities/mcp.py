"""MCP servers' tools: one connection per configured server, opened on first use and kept;
the tool lists each server offers, cached until it says they changed; and the activity that
runs `tool.mcp.<server>.<tool>`.

A connection that fails (a stdio server that died, an HTTP server that went away) is
dropped and opened afresh by the next call, so a retried attempt starts the server again.
The API uses the same hub to list tools when a run is submitted; a worker uses it to call
them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from typing import Any, cast

import mcp.types as mcp_types
from mcp import Client, MCPError
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import RequestParamsMeta
from pydantic import SecretStr
from temporalio import activity
from temporalio.common import RawValue

from activities.errors import fatal, reported_with_attempt, transient
from activities.heartbeat import heartbeating
from activities.tools import egress, sandbox
from activities.tools.registry import redact
from longrun.artifacts import store_for
from longrun.contracts import McpTool, ToolCall, ToolResult
from longrun.mcp_servers import (
    PREFIX,
    McpServer,
    McpServers,
    SecretName,
    load_mcp_servers,
    split_name,
)
from longrun.policy import forbidding
from longrun.settings import Settings, get_settings

log = logging.getLogger("longrun.mcp")

# Tools runs can name: `mcp.<server>.<tool>` whose function name for a model
# (workflows/agent/briefs.py: `mcp__<server>__<tool>`) OpenAI takes: letters, digits, `_`
# and `-`, at most 64 characters. A server's other tools are left out.
NAMEABLE = re.compile(r"[A-Za-z0-9_.-]+")
FUNCTION_NAME_MAX = 64
IDEMPOTENCY_META = "longrun/idempotency-key"
# A submission or `GET /v1/tools` waits at most this long (or the server's `timeout_s`, if
# shorter) for a server to connect and list its tools.
LIST_WITHIN_S = 10.0


def _nameable(name: str) -> bool:
    return bool(NAMEABLE.fullmatch(name)) and len(name.replace(".", "__")) <= FUNCTION_NAME_MAX


class McpUnavailable(Exception):
    """A server could not be reached or listed; the message says which and why."""


class McpSecretMissing(McpUnavailable):
    """A server's env or headers name a secret this process does not hold: no attempt
    will do better until it is configured."""


class _Link:
    """The connection to one server, held open by a task of its own (the SDK's transports
    must be entered and left in one task)."""

    def __init__(
        self,
        name: str,
        server: McpServer,
        secrets: Mapping[str, SecretStr],
        sandbox: str,
        egress_settings: Settings | None,
    ) -> None:
        self.name = name
        self.server = server
        self._secrets = secrets
        self._sandbox = sandbox
        self._egress_settings = egress_settings
        self._lock = asyncio.Lock()
        self._client: Client | None = None
        self._stop = asyncio.Event()
        self._holder: asyncio.Task[None] | None = None
        self._tools: list[McpTool] | None = None

    def revealed(self) -> list[str]:
        """The secret values this connection sends (blanked out of what calls return)."""
        return [self._reveal(SecretName(secret=s)) for s in self.server.secrets()]

    def _settings(self) -> Settings:
        """The settings that bound a confined server and decide where it may connect."""
        return self._egress_settings or get_settings()

    def _confined(self) -> bool:
        """Whether the server runs inside bubblewrap: it asks for a sandbox, and this worker
        confines (refused if it cannot, unless LONGRUN_SANDBOX=unconfined)."""
        if not self.server.sandbox:
            return False
        rules = self._settings()
        found = sandbox.confinement_of(
            self._sandbox, rules.sandbox_cgroup, frozenset(rules.sandbox_unenforced)
        )
        if found.mode == "unavailable":
            raise McpUnavailable(
                f"MCP server '{self.name}' runs in a sandbox, which this worker cannot "
                f"start: {found.detail}"
            )
        return found.confined

    async def _stdio(self, stack: AsyncExitStack) -> StdioServerParameters:
        """How a stdio server starts. Confined with network, it reaches the world as process
        tools do: through the worker's egress proxy, by the destination rule, for as long
        as the connection lasts."""
        server = self.server
        env = {k: self._reveal(v) for k, v in server.env.items()}
        argv = server.command
        if self._confined():
            rules = self._settings()
            door = None
            if server.network:
                door = await stack.enter_async_context(egress.door(rules))
                env.update(egress.environment())
            tmp_bytes = rules.sandbox_tmp_mb * sandbox.MB
            argv = sandbox.server_argv(server.command, server.paths, tmp_bytes, door)
        return StdioServerParameters(command=argv[0], args=argv[1:], env=env)

    def _reveal(self, value: str | SecretName) -> str:
        if isinstance(value, str):
            return value
        found = self._secrets.get(value.secret)
        if found is None:
            raise McpSecretMissing(
                f"MCP server '{self.name}' names the secret '{value.secret}', "
                "which LONGRUN_SECRETS does not hold"
            )
        return found.get_secret_value()

    async def client(self) -> Client:
        """The open connection, opening it if there is none."""
        async with self._lock:
            if self._client is None:
                ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
                self._stop = asyncio.Event()
                self._holder = asyncio.create_task(self._hold(ready, self._stop))
                try:
                    self._client = await asyncio.shield(ready)
                except asyncio.CancelledError:  # given up on (a timeout): stop connecting
                    self._holder.cancel()
                    raise
            return self._client

    async def _hold(self, ready: asyncio.Future[Client], stop: asyncio.Event) -> None:
        server = self.server
        try:
            async with AsyncExitStack() as stack:
                transport: StdioServerParameters | Any
                if server.transport == "stdio":
                    transport = await self._stdio(stack)
                else:
                    assert server.url is not None
                    headers = {k: self._reveal(v) for k, v in server.headers.items()}
                    http = await stack.enter_async_context(create_mcp_http_client(headers))
                    transport = streamable_http_client(server.url, http_client=http)
                client = Client(
                    transport,
                    message_handler=self._on_message,
                    read_timeout_seconds=server.timeout_s,
                    cache=None,
                )
                ready.set_result(await stack.enter_async_context(client))
                await self._follow_changes(client, stop)
        except Exception as exc:
            if not ready.done():
                ready.set_exception(
                    exc
                    if isinstance(exc, McpSecretMissing)
                    else McpUnavailable(f"MCP server '{self.name}' could not be reached: {exc}")
                )
            else:
                log.info("MCP server %r: connection closed: %s", self.name, exc)
        finally:
            if ready.done() and not ready.cancelled() and ready.exception() is None:
                self.broken(ready.result())  # a connection that ended is opened again

    async def _follow_changes(self, client: Client, stop: asyncio.Event) -> None:
        """Until `stop`: forget the cached tool list whenever the server says it changed.
        Servers of protocol 2026-07-28 and later say so on a `subscriptions/listen` stream;
        older ones send `notifications/tools/list_changed` (`_on_message`)."""
        stopping = asyncio.ensure_future(stop.wait())
        try:
            async with client.listen(tools_list_changed=True) as changes:
                events = aiter(changes)
                while True:
                    event = asyncio.ensure_future(anext(events))
                    await asyncio.wait({stopping, event}, return_when=asyncio.FIRST_COMPLETED)
                    if stopping.done():
                        event.cancel()
                        return
                    event.result()  # StopAsyncIteration: the server closed the stream
                    log.info("MCP server %r: its tools changed; listing them again", self.name)
                    self._tools = None
        except ListenNotSupportedError:
            pass
        except (StopAsyncIteration, SubscriptionLost, MCPError, OSError) as exc:
            # The connection stays for calls; only news of changes is lost.
            log.info("MCP server %r: no longer told of tool changes: %s", self.name, exc)
            self._tools = None  # what changed meanwhile is not known: list again
        await stopping

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            log.info("MCP server %r: its tools changed; listing them again on next use", self.name)
            self._tools = None

    def broken(self, client: Client) -> None:
        """A call on `client` failed outside the tool: open a new connection next time."""
        if self._client is client:
            self._client = None
            self._tools = None
            self._stop.set()

    async def tools(self) -> list[McpTool]:
        """The tools runs may see, as the server lists them now (cached)."""
        if self._tools is not None:
            return self._tools
        client = await self.client()
        listed: list[mcp_types.Tool] = []
        cursor: str | None = None
        try:
            while True:
                page = await client.list_tools(cursor=cursor)
                listed += page.tools
                cursor = page.next_cursor
                if cursor is None:
                    break
        except Exception as exc:
            self.broken(client)
            raise McpUnavailable(f"MCP server '{self.name}' did not list its tools: {exc}") from exc
        tools = [
            McpTool(
                name=f"{PREFIX}{self.name}.{t.name}",
                description=(t.description or t.title or t.name).strip()[:1000],
                input_schema=t.input_schema,
                side_effect=self.server.side_effect(t.name),
            )
            for t in listed
            if self.server.exposes(t.name) and _nameable(f"{PREFIX}{self.name}.{t.name}")
        ]
        self._tools = tools
        return tools

    async def aclose(self) -> None:
        self._stop.set()
        if self._holder is not None:
            # A connection still being opened waits for nothing: it is cancelled.
            done, _ = await asyncio.wait([self._holder], timeout=5)
            if not done:
                self._holder.cancel()
                await asyncio.wait([self._holder])


class McpHub:
    """The configured MCP servers of one process."""

    def __init__(
        self,
        config: McpServers,
        secrets: Mapping[str, SecretStr],
        sandbox: str = "bwrap",
        egress_settings: Settings | None = None,
    ) -> None:
        """`egress_settings` decide where confined servers with network may connect (this
        process's settings when None)."""
        self._links = {
            name: _Link(name, s, secrets, sandbox, egress_settings)
            for name, s in config.servers.items()
        }

    @classmethod
    def of(cls, settings: Settings) -> McpHub:
        """The servers `LONGRUN_MCP_SERVERS` configures (a bad file raises McpConfigError)."""
        return cls(
            load_mcp_servers(settings.mcp_servers_file),
            settings.secrets,
            settings.sandbox,
            settings,
        )

    @property
    def servers(self) -> list[str]:
        """The configured servers' names."""
        return list(self._links)

    async def tools(self, servers: Sequence[str] | None = None) -> tuple[list[McpTool], list[str]]:
        """The tools of `servers` (all when None) that could be listed, and why the others
        could not."""
        names = [s for s in (self._links if servers is None else servers) if s in self._links]
        found = await asyncio.gather(
            *(self._listed(self._links[s]) for s in names), return_exceptions=True
        )
        tools: list[McpTool] = []
        problems: list[str] = []
        for result in found:
            if isinstance(result, McpUnavailable):
                problems.append(str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                tools += result
        return tools, problems

    @staticmethod
    async def _listed(link: _Link) -> list[McpTool]:
        within = min(link.server.timeout_s, LIST_WITHIN_S)
        try:
            return await asyncio.wait_for(link.tools(), within)
        except TimeoutError:
            raise McpUnavailable(
                f"MCP server '{link.name}' did not list its tools within {within:g} s"
            ) from None

    async def call(self, name: str, args: dict[str, Any], idempotency_key: str) -> dict[str, Any]:
        """Call `mcp.<server>.<tool>`; its output as `{"text", "structured"?, "content"?}`.
        A tool that reports an error fails the call for good (the server ran it and said
        no); anything else is worth another attempt on a fresh connection."""
        parts = split_name(name)
        link = self._links.get(parts[0]) if parts else None
        if parts is None or link is None:
            raise fatal(f"no MCP server on this worker serves '{name}' (LONGRUN_MCP_SERVERS)")
        try:
            client = await link.client()
        except McpSecretMissing as exc:
            raise fatal(str(exc), type="SecretMissing") from None
        except McpUnavailable as exc:
            raise transient(str(exc)) from None
        secrets = link.revealed()
        try:
            meta = cast(RequestParamsMeta, {IDEMPOTENCY_META: idempotency_key})
            result = await client.call_tool(parts[1], args, meta=meta)
        except Exception as exc:
            link.broken(client)
            message = redact(f"MCP server '{link.name}': {type(exc).__name__}: {exc}", secrets)
            raise transient(message) from None
        text = "\n".join(c.text for c in result.content if isinstance(c, mcp_types.TextContent))
        if result.is_error:
            raise fatal(redact(f"{name} failed: {text[:4000]}", secrets), type="McpToolError")
        output: dict[str, Any] = {"text": text}
        if result.structured_content is not None:
            output["structured"] = result.structured_content
        other = [c for c in result.content if not isinstance(c, mcp_types.TextContent)]
        if other:
            output["content"] = [c.model_dump(mode="json", exclude_none=True) for c in other]
        redacted: dict[str, Any] = redact(output, secrets)
        return redacted

    async def aclose(self) -> None:
        """Close every connection (stdio servers exit)."""
        await asyncio.gather(*(link.aclose() for link in self._links.values()))


def build_mcp_activity(hub: McpHub, settings: Settings) -> Callable[..., Any]:
    """The activity behind every `tool.mcp.<server>.<tool>`: one dynamic activity, so a
    tool a server adds later needs no new worker."""
    store = store_for(settings)
    threshold = settings.artifact_threshold_bytes

    @activity.defn(dynamic=True)
    async def call_mcp_tool(args: Sequence[RawValue]) -> ToolResult:
        name = activity.info().activity_type
        if not name.startswith("tool." + PREFIX) or len(args) != 1:
            raise fatal(f"no activity '{name}' on this worker")
        call = activity.payload_converter().from_payload(args[0].payload, ToolCall)
        with reported_with_attempt() as attempt:
            refusal = forbidding(settings.policy_file, name.removeprefix("tool."))
            if refusal is not None:
                raise fatal(refusal, type="ToolForbidden")
            raw = await store.expanded(call.run_id, call.args)
            async with heartbeating():
                output = await hub.call(name.removeprefix("tool."), raw, call.idempotency_key)
            output = await store.offloaded(call.run_id, output, threshold)
        return ToolResult(output=output, attempt=attempt)

    return call_mcp_tool
