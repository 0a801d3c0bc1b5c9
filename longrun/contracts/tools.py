"""The tool activities' boundary: input and output of every `tool.<name>` activity, and an
MCP server's tool as a run knows it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from longrun.contracts.common import SideEffect


class SecretGrant(BaseModel):
    """Whom a run acts for and the secrets it may use ("*": all): every tool call and check
    carries it, and the activity that would reveal a secret checks it there."""

    owner: str = ""
    names: list[str] = Field(default_factory=list)

    def allows(self, name: str) -> bool:
        """Whether the secret `name` is granted."""
        return "*" in self.names or name in self.names


class ToolCall(BaseModel):
    """Input of every `tool.<name>` activity."""

    run_id: str
    step_id: str
    idempotency_key: str
    args: dict[str, Any] = Field(default_factory=dict)
    # A call scheduled before runs carried grants may use no secret.
    grant: SecretGrant = Field(default_factory=SecretGrant)
    # An earlier call of the run completed in its workspace: a worker without it lost it.
    workspace_used: bool = False


class ToolResult(BaseModel):
    """Output of every `tool.<name>` activity."""

    output: dict[str, Any]
    attempt: int = 1
    # Answered from the recorded output of the run a counterfactual fork replays: nothing
    # ran, so there is nothing to undo.
    replayed: bool = False
    # The call answered, when it ran as a local activity: history keeps no input of those,
    # and forks and cassettes read calls from history.
    call: ToolCall | None = None


class RecordedCall(BaseModel):
    """A tool call a run made and its output: a counterfactual fork of the run answers the
    same call (same tool, same arguments) with it instead of running it."""

    tool: str
    args: dict[str, Any]
    output: dict[str, Any]


class McpTool(BaseModel):
    """A tool of a configured MCP server, as the API found it when the run was submitted:
    the run keeps it, so its schema and side-effect class stay what the run was checked
    against however the server changes."""

    name: str  # mcp.<server>.<tool>
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})
    side_effect: SideEffect = SideEffect.IRREVERSIBLE

    @property
    def server(self) -> str:
        """The configured server's name."""
        return self.name.split(".", 2)[1]

    @property
    def tool(self) -> str:
        """The tool's name on its server."""
        return self.name.split(".", 2)[2]
