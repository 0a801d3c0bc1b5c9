"""An MCP server over stdio whose tool list grows: `grow` adds a tool and tells the client
its tools changed (on the `subscriptions/listen` stream of protocol 2026-07-28), as servers
that load plugins do."""

from __future__ import annotations

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("growing", log_level="WARNING")


@server.tool()
async def grow(name: str, ctx: Context) -> str:
    """Add a tool called `name` that answers with its own name."""

    def added() -> str:
        return name

    server.add_tool(added, name=name, description=f"a tool added by grow: {name}")
    await ctx.notify_tools_changed()
    return f"added {name}"


if __name__ == "__main__":
    server.run("stdio")
