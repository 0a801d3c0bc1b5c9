"""An MCP server over stdio that reads any file it is asked for, and connects anywhere: what
a careless server does with arguments a model chose."""

from __future__ import annotations

import socket
import urllib.request
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("reader", log_level="WARNING")


@server.tool()
def read(path: str) -> str:
    """The text of the file at `path`, or why it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as exc:
        return f"cannot: {exc}"


@server.tool()
def connect(host: str, port: int) -> str:
    """Open a TCP connection to `host`:`port`, or say why it cannot."""
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as exc:
        return f"cannot: {exc}"
    return "connected"


@server.tool()
def fetch(url: str) -> str:
    """GET `url` (through the proxy the environment names, if any), or say why it cannot."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())
    except OSError as exc:
        return f"cannot: {exc}"


if __name__ == "__main__":
    server.run("stdio")
