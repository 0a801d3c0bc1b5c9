"""Which MCP servers runs may use, read from the file `LONGRUN_MCP_SERVERS` names (TOML, or
JSON when it ends in `.json`):

    [servers.time]
    transport = "stdio"
    command = ["mcp-server-time", "--local-timezone", "UTC"]
    tools = ["get_current_time", "convert_time"]     # which to expose; all when left out
    side_effects = { get_current_time = "read_only", convert_time = "read_only" }

    [servers.repo]
    transport = "stdio"
    command = ["mcp-server-git", "--repository", "/srv/repo"]
    sandbox = true          # inside bubblewrap: system files read-only, no network, and
    paths = ["/srv/repo"]   # of the worker's files only these (read-write)

    [servers.tickets]
    transport = "streamable-http"
    url = "https://tickets.example/mcp"
    headers = { Authorization = { secret = "tickets_token" } }

Their tools join the tool registry as `mcp.<server>.<tool>`. A tool's side-effect class is
what this file says, `irreversible` unless it says otherwise, so it is gated like a built-in;
a server's own hints (`readOnlyHint`) are not trusted. Values in `env` and `headers` may name
a secret of `LONGRUN_SECRETS` instead of holding it.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from longrun.contracts import SideEffect

PREFIX = "mcp."


class SecretName(BaseModel):
    """Names a secret of `LONGRUN_SECRETS`; only the process that connects reads it."""

    model_config = ConfigDict(extra="forbid")

    secret: str = Field(min_length=1, max_length=200)


class McpServer(BaseModel):
    """One MCP server: how to reach it and what of it runs may use."""

    model_config = ConfigDict(extra="forbid")

    transport: Literal["stdio", "streamable-http"]
    command: list[str] = Field(default_factory=list)
    env: dict[str, str | SecretName] = Field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str | SecretName] = Field(default_factory=dict)
    tools: list[str] | None = None
    # Only what needs no undo: an MCP tool has no compensating call longrun could make.
    side_effects: dict[str, Literal[SideEffect.READ_ONLY, SideEffect.IRREVERSIBLE]] = Field(
        default_factory=dict
    )
    # One call's limit; a slower call fails its attempt and is retried.
    timeout_s: float = Field(60.0, gt=0, le=3600)
    # A stdio server inside bubblewrap, as process tools run (activities/tools/sandbox.py):
    # it sees system directories and the worker's Python environment read-only, `paths`
    # read-write, nothing else of the worker's, and no network unless `network`: then the
    # destinations LONGRUN_HTTP_ALLOW_HOSTS allows, through the worker's egress proxy.
    sandbox: bool = False
    paths: list[str] = Field(default_factory=list)
    network: bool = False

    @model_validator(mode="after")
    def _reachable(self) -> McpServer:
        if self.transport == "stdio" and (not self.command or self.url is not None):
            raise ValueError("a stdio server needs `command` (argv) and no `url`")
        if self.transport == "streamable-http" and (self.url is None or self.command):
            raise ValueError("a streamable-http server needs `url` and no `command`")
        if (self.paths or self.network) and not self.sandbox:
            raise ValueError("`paths` and `network` apply to a server with `sandbox = true`")
        if self.sandbox and self.transport != "stdio":
            raise ValueError("only a stdio server runs in a sandbox")
        if any(not p.startswith("/") for p in self.paths):
            raise ValueError("`paths` are absolute paths")
        return self

    def side_effect(self, tool: str) -> SideEffect:
        """The side-effect class of one of its tools."""
        return self.side_effects.get(tool, SideEffect.IRREVERSIBLE)

    def exposes(self, tool: str) -> bool:
        """Whether runs may see one of its tools."""
        return self.tools is None or tool in self.tools

    def secrets(self) -> list[str]:
        """The secrets its connection uses."""
        values = [*self.env.values(), *self.headers.values()]
        return [v.secret for v in values if isinstance(v, SecretName)]


class McpServers(BaseModel):
    """The whole file."""

    model_config = ConfigDict(extra="forbid")

    servers: dict[str, McpServer] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _names(self) -> McpServers:
        for name in self.servers:
            if not name.replace("-", "").replace("_", "").isalnum() or len(name) > 40:
                raise ValueError(f"server name '{name}': letters, digits, '-' and '_' only")
        return self


class McpConfigError(ValueError):
    """The file cannot be read or says something longrun cannot do."""


def load_mcp_servers(path: Path | None) -> McpServers:
    """The servers in `path`, or none when no file is configured."""
    if path is None:
        return McpServers()
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
        return McpServers.model_validate(data)
    except (OSError, ValueError, ValidationError) as exc:
        raise McpConfigError(f"MCP servers file {path}: {exc}") from exc


def split_name(name: str) -> tuple[str, str] | None:
    """`mcp.<server>.<tool>` as (server, tool); None for any other name."""
    if not name.startswith(PREFIX):
        return None
    server, dot, tool = name[len(PREFIX) :].partition(".")
    return (server, tool) if dot and server and tool else None
