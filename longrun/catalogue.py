"""The tool catalogue: what plans, agents, the API and compensation know of a tool without
running it: its name, description, argument model, side-effect class and undo, and whether
it hands secrets to a command or may run as a local activity. The built-in tools are
declared here and implemented in activities/tools/ (a worker will not start with a declared
tool it cannot run); an MCP server's tools join them per run (`toolbox`)."""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from longrun.contracts import McpTool, SideEffect

OUTPUT_CAP_BYTES = 64 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Headers the client derives from the url and body; a step setting them could send a
# request somewhere its url does not say.
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
BACKUPS = Path(".longrun") / "backups"  # inside the workspace: what write_file replaced


def check_relative(path: str) -> str:
    """Reject paths that name something outside the workspace on their face."""
    if not path or "\x00" in path:
        raise ValueError("path must be a non-empty string without NUL bytes")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~"):
        raise ValueError("path must be relative to the run's workspace, not absolute")
    if ".." in pure.parts:
        raise ValueError("path must not contain '..'")
    if not pure.parts:
        raise ValueError("path must name a file inside the workspace")
    return path


# --- what a tool is --------------------------------------------------------------------------

Compensation = Callable[[Any, dict[str, Any]], tuple[str, dict[str, Any]] | None]


@dataclass(frozen=True)
class ToolSpec:
    """A tool as longrun knows it without running it: its argument schema, its side-effect
    class, its undo."""

    name: str
    description: str
    args_model: type[BaseModel]
    side_effect: SideEffect | Callable[[Any], SideEffect]
    compensation: Compensation | None = None
    # Hands named secrets to a command that may pass them on in any form: such a call
    # needs approval unless the policy vouches for it (longrun.policy).
    exposes_secrets: bool = False
    # Short, read-only and safe to run again: a run may call it as a local activity, in the
    # worker task that asked for it (workflows/calls.py). Turning it on or off for a tool
    # changes the commands of runs that call it: only behind a new STARTED_WITH change.
    quick: bool = False

    @property
    def activity_name(self) -> str:
        """The activity name, a wire contract: `tool.<name>`."""
        return f"tool.{self.name}"

    def side_effect_of(self, args: BaseModel) -> SideEffect:
        """The side-effect class of one call (it may depend on the arguments)."""
        if isinstance(self.side_effect, SideEffect):
            return self.side_effect
        return self.side_effect(args)

    def side_effect_for(self, args: dict[str, Any]) -> SideEffect:
        """The side-effect class of a call (of a completed one: see `parse`)."""
        return self.side_effect_of(self.parse(args))

    def args_errors(self, args: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
        """What is wrong with a call's arguments, each located inside them."""
        try:
            self.args_model.model_validate(args)
        except ValidationError as exc:
            accepted = ", ".join(self.args_model.model_fields)
            return [
                (
                    tuple(err["loc"]),
                    f"{err['msg']} ({self.name} takes: {accepted})"
                    if err["type"] in ("extra_forbidden", "missing")
                    else str(err["msg"]),
                )
                for err in exc.errors()
            ]
        return []

    def parameters(self) -> dict[str, Any]:
        """The JSON schema of its arguments."""
        return self.args_model.model_json_schema()

    def parse(self, args: dict[str, Any]) -> BaseModel:
        """A completed call's arguments as the tool's model. Arguments may still hold
        artifact references (the tool read through them); those were checked when the step
        was planned, so they are taken as they are."""
        try:
            return self.args_model.model_validate(args)
        except ValidationError:
            return self.args_model.model_construct(**args)

    def undo(
        self, args: dict[str, Any], output: dict[str, Any]
    ) -> tuple[str, dict[str, Any]] | None:
        """The call (tool name and arguments) that undoes a completed call, if there is one."""
        if self.compensation is None:
            return None
        return self.compensation(self.parse(args), output)


CATALOGUE: dict[str, ToolSpec] = {}


def declare(
    name: str,
    *,
    description: str,
    args: type[BaseModel],
    side_effect: SideEffect | Callable[[Any], SideEffect],
    compensate: Compensation | None = None,
    exposes_secrets: bool = False,
    quick: bool = False,
) -> ToolSpec:
    """Add the tool `name` to the catalogue. A reversible tool passes `compensate`: from a
    call's arguments and output, the tool call that undoes it. A `quick` one (short,
    read-only, safe to run again) may run as a local activity."""
    if name in CATALOGUE:
        raise ValueError(f"tool '{name}' is declared twice")
    spec = ToolSpec(name, description, args, side_effect, compensate, exposes_secrets, quick)
    CATALOGUE[name] = spec
    return spec


# --- the built-in tools ----------------------------------------------------------------------


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EchoArgs(_Args):
    value: Any = None


class SecretRef(_Args):
    """Names a secret from LONGRUN_SECRETS; only the activity sees its value."""

    secret: str = Field(min_length=1, max_length=200)


class HttpRequestArgs(_Args):
    method: Literal["GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    url: str = Field(min_length=1, max_length=8192)
    headers: dict[str, str | SecretRef] = Field(default_factory=dict)
    body: str | dict[str, Any] | list[Any] | None = None
    timeout_s: float = Field(30.0, gt=0, le=600)
    raise_for_status: bool = True
    max_response_bytes: int = Field(OUTPUT_CAP_BYTES, gt=0, le=1024 * 1024)
    retry_if_sent: bool = Field(
        False,
        description="send a POST or PATCH again after a timeout or a 5xx (only for servers "
        "that apply each Idempotency-Key once)",
    )

    @field_validator("headers")
    @classmethod
    def _no_framing_headers(cls, headers: dict[str, Any]) -> dict[str, Any]:
        for name in headers:
            if name.lower() in FRAMING_HEADERS:
                raise ValueError(f"header '{name}' is set from the url and body, not by a step")
        return headers

    @field_validator("url")
    @classmethod
    def _http_only(cls, url: str) -> str:
        if not url.lower().startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        return url


def _http_effect(args: HttpRequestArgs) -> SideEffect:
    return SideEffect.READ_ONLY if args.method in SAFE_METHODS else SideEffect.IRREVERSIBLE


class ShellArgs(_Args):
    argv: list[str] = Field(min_length=1, max_length=1000)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    check: bool = True
    stdin: str | None = None
    secret_env: dict[str, SecretRef] = Field(
        default_factory=dict, description="environment variables set from named secrets"
    )


class PythonArgs(_Args):
    code: str = Field(min_length=1, max_length=200_000)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    check: bool = True


class _PathArgs(_Args):
    path: str = Field(max_length=1024)

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        return check_relative(path)


class ReadFileArgs(_PathArgs):
    max_bytes: int = Field(OUTPUT_CAP_BYTES, gt=0, le=1024 * 1024)


class WriteFileArgs(_PathArgs):
    content: str = Field(max_length=10 * 1024 * 1024)

    @field_validator("path")
    @classmethod
    def _not_reserved(cls, path: str) -> str:
        if PurePosixPath(path).parts[:1] == (BACKUPS.parts[0],):
            raise ValueError(f"{BACKUPS.parts[0]}/ is reserved for longrun's own files")
        return path


BACKUPS = Path(".longrun") / "backups"  # inside the workspace: what write_file replaced


def _undo_write(args: WriteFileArgs, output: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "restore_file", {"path": args.path, "backup": output.get("backup")}


class RestoreFileArgs(_PathArgs):
    backup: str | None = Field(None, max_length=1024, description="unset: remove the file")

    @field_validator("backup")
    @classmethod
    def _relative_backup(cls, backup: str | None) -> str | None:
        return None if backup is None else check_relative(backup)


class NoteArgs(_Args):
    text: str = Field(min_length=1, max_length=2000)
    kind: Literal["fact", "decision", "question"] = "fact"


declare(
    "echo",
    description="Return `value` unchanged; handy for shaping data between steps.",
    args=EchoArgs,
    side_effect=SideEffect.READ_ONLY,
    quick=True,
)
declare(
    "http_request",
    description="Send one HTTP request to an allowed destination; the response body is capped.",
    args=HttpRequestArgs,
    side_effect=_http_effect,
)
declare(
    "shell",
    description="Run a command (an argv list, no shell) in the run's workspace.",
    args=ShellArgs,
    side_effect=SideEffect.IRREVERSIBLE,
    exposes_secrets=True,
)
declare(
    "python",
    description="Run Python code in a fresh interpreter in the run's workspace.",
    args=PythonArgs,
    side_effect=SideEffect.IRREVERSIBLE,
)
declare(
    "read_file",
    description="Read a text file from the run's workspace.",
    args=ReadFileArgs,
    side_effect=SideEffect.READ_ONLY,
    quick=True,
)
declare(
    "write_file",
    description="Write a text file in the run's workspace, atomically, replacing any earlier "
    "content.",
    args=WriteFileArgs,
    side_effect=SideEffect.REVERSIBLE,
    compensate=_undo_write,
)
declare(
    "restore_file",
    description="Put back a file's earlier content from a backup, or remove it if it had none.",
    args=RestoreFileArgs,
    side_effect=SideEffect.IRREVERSIBLE,
)
declare(
    "note",
    description="Keep a fact, decision or open question in the run's journal for later steps.",
    args=NoteArgs,
    side_effect=SideEffect.READ_ONLY,
)


# --- a run's tools: the catalogue and its MCP tools ---------------------------------------------

Loc = tuple[str | int, ...]
MAX_ERRORS = 20


@dataclass(frozen=True)
class McpToolSpec:
    """An MCP server's tool as a run knows it (`McpTool`), with a built-in's interface."""

    tool: McpTool
    exposes_secrets: bool = False
    quick: bool = False  # a call goes to a server: never a local activity

    @property
    def name(self) -> str:
        return self.tool.name

    @property
    def description(self) -> str:
        return self.tool.description

    def side_effect_for(self, args: dict[str, Any]) -> SideEffect:
        return self.tool.side_effect

    def args_errors(self, args: dict[str, Any]) -> list[tuple[Loc, str]]:
        try:
            validator = Draft202012Validator(self.tool.input_schema)
            errors = sorted(validator.iter_errors(args), key=lambda e: list(e.absolute_path))
        except (SchemaError, RecursionError) as exc:  # the server's schema, not the caller's
            return [((), f"{self.name} has an input schema longrun cannot check: {exc}")]
        return [(tuple(e.absolute_path), e.message[:500]) for e in errors[:MAX_ERRORS]]

    def parameters(self) -> dict[str, Any]:
        return self.tool.input_schema

    def undo(self, args: dict[str, Any], output: dict[str, Any]) -> None:
        """No MCP call has a known undo."""
        return None


AnyTool = ToolSpec | McpToolSpec


def toolbox(mcp_tools: Iterable[McpTool]) -> Mapping[str, AnyTool]:
    """Every tool a run with these MCP tools may name."""
    mcp: dict[str, AnyTool] = {t.name: McpToolSpec(t) for t in mcp_tools}
    builtin: dict[str, AnyTool] = dict(CATALOGUE)
    return ChainMap(mcp, builtin)
