"""The built-in tools. Each is one registered function; see `registry.tool`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import os
import shutil
import signal
import ssl
import sys
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, field_validator

from activities.errors import fatal, retry_after_seconds, transient
from activities.tools import egress, sandbox
from activities.tools.destinations import Refused, checked_client
from activities.tools.registry import ToolContext, tool
from activities.tools.workspace import check_relative, confine
from longrun import grants
from longrun.contracts import SideEffect
from longrun.policy import policy_in_force

OUTPUT_CAP_BYTES = 64 * 1024
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Headers the client derives from the url and body; a step setting them could send a
# request somewhere its url does not say.
FRAMING_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
# Response headers that carry credentials; they would otherwise land in workflow history.
SECRET_HEADERS = frozenset(
    {"set-cookie", "authorization", "proxy-authenticate", "www-authenticate"}
)


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- echo ----------------------------------------------------------------------------------


class EchoArgs(_Args):
    value: Any = None


@tool("echo", args=EchoArgs, side_effect=SideEffect.READ_ONLY, quick=True)
async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return `value` unchanged; handy for shaping data between steps."""
    return {"value": args.value}


# --- http_request --------------------------------------------------------------------------


class SecretRef(_Args):
    """Names a secret from LONGRUN_SECRETS; only the activity sees its value."""

    secret: str = Field(min_length=1, max_length=200)


def reveal(ctx: ToolContext, value: str | SecretRef) -> str:
    """A plain value as is; a secret's value, looked up at the last moment, if the run's
    grant allows it: however its name reached the arguments (a template, a for_each item,
    an upstream answer, a model), this is where it is checked."""
    if isinstance(value, str):
        return value
    refused = grants.refusal(ctx.settings, ctx.grant, value.secret)
    if refused is not None:
        raise fatal(refused, type="SecretNotGranted")
    found = ctx.settings.secrets.get(value.secret)
    if found is None:
        raise fatal(f"no secret named '{value.secret}' is configured (LONGRUN_SECRETS)")
    ctx.revealed.append(found.get_secret_value())
    return found.get_secret_value()


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


@functools.cache
def _tls_context() -> ssl.SSLContext:
    # Loading the CA bundle costs tens of milliseconds of CPU; do it once per worker.
    return httpx.create_ssl_context()


def _http_effect(args: HttpRequestArgs) -> SideEffect:
    return SideEffect.READ_ONLY if args.method in SAFE_METHODS else SideEffect.IRREVERSIBLE


@tool("http_request", args=HttpRequestArgs, side_effect=_http_effect)
async def http_request(args: HttpRequestArgs, ctx: ToolContext) -> dict[str, Any]:
    """Send one HTTP request to an allowed destination; the response body is capped."""
    url = httpx.URL(args.url)
    headers = {
        "Idempotency-Key": ctx.idempotency_key,
        **{name: reveal(ctx, value) for name, value in args.headers.items()},
    }
    for name, value in headers.items():
        if "\r" in value or "\n" in value:  # a secret stored with its line break, say
            raise fatal(f"header '{name}' has a line break, which no header value may hold")
    content: bytes | None = None
    if isinstance(args.body, str):
        content = args.body.encode()
    elif args.body is not None:
        content = json.dumps(args.body).encode()
        headers.setdefault("Content-Type", "application/json")
    # POST and PATCH are not idempotent: once they may have reached the server, they are
    # sent again only if the step says the server honours their Idempotency-Key.
    once = args.method in ("POST", "PATCH") and not args.retry_if_sent
    try:
        async with (
            checked_client(ctx.settings, timeout_s=args.timeout_s, verify=_tls_context()) as client,
            client.stream(args.method, url, headers=headers, content=content) as response,
        ):
            body = bytearray()
            truncated = False
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > args.max_response_bytes:
                    truncated = True
                    del body[args.max_response_bytes :]
                    break
    except Refused as exc:
        raise fatal(str(exc), type="DestinationRefused") from None
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout):
        raise  # never sent: retried like any transient failure
    except httpx.TransportError as exc:
        if once:
            raise fatal(
                f"{args.method} {args.url} may have been sent and got no answer "
                f"({type(exc).__name__}); not sent again (set retry_if_sent if the server "
                "honours Idempotency-Key)",
                type="MaybeSent",
            ) from None
        raise
    text = body.decode(errors="replace")
    status = response.status_code
    not_done = status in (408, 429, 503)  # the server says it did not act on it
    if once and status >= 500 and not not_done:
        raise fatal(
            f"{args.method} {args.url} answered {status} and may have acted on it; not sent "
            f"again (set retry_if_sent if the server honours Idempotency-Key): {text[:500]}",
            type="MaybeSent",
        )
    if status in (408, 429) or status >= 500:
        raise transient(
            f"{args.method} {args.url} answered {status}: {text[:500]}",
            retry_after_s=retry_after_seconds(response.headers.get("retry-after")),
        )
    if status >= 400 and args.raise_for_status:
        raise fatal(f"{args.method} {args.url} answered {status}: {text[:500]}", type="HttpError")
    result: dict[str, Any] = {
        "status": status,
        "headers": {k: v for k, v in response.headers.items() if k.lower() not in SECRET_HEADERS},
        "body": text,
        "truncated": truncated,
    }
    if not truncated and "json" in response.headers.get("content-type", ""):
        with contextlib.suppress(ValueError):
            result["json"] = json.loads(text)
    return result


# --- shell and python ----------------------------------------------------------------------


async def _read_capped(stream: asyncio.StreamReader | None, cap: int) -> tuple[str, bool]:
    kept = bytearray()
    total = 0
    if stream is not None:
        while chunk := await stream.read(65536):
            total += len(chunk)
            if len(kept) < cap:
                kept.extend(chunk[: cap - len(kept)])
    return kept.decode(errors="replace"), total > cap


async def _exit_of(proc: asyncio.subprocess.Process) -> int:
    """The exit code, as soon as the process exits (`wait()` also waits for its pipes to
    close, which children left in the background keep open). asyncio offers no event for
    the exit alone, so this looks every 0.1 s; it only matters once output stays open."""
    while proc.returncode is None:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return proc.returncode


async def _run_process(
    tool: str,
    argv: list[str],
    ctx: ToolContext,
    *,
    timeout_s: float,
    check: bool,
    stdin: bytes | None = None,
    secret_env: dict[str, SecretRef] | None = None,
) -> dict[str, Any]:
    confinement = sandbox.confinement(ctx.settings)
    if confinement.mode == "unavailable":
        raise fatal(
            f"process tools are refused on this worker: {confinement.detail}",
            type="SandboxUnavailable",
        )
    env = {
        **{name: reveal(ctx, ref) for name, ref in (secret_env or {}).items()},
        "PATH": sandbox.PATH if confinement.confined else os.environ.get("PATH", sandbox.PATH),
        "HOME": sandbox.WORKSPACE if confinement.confined else str(ctx.workspace),
        "LANG": "C.UTF-8",
        "LONGRUN_RUN_ID": ctx.run_id,
        "LONGRUN_STEP_ID": ctx.step_id,
        "LONGRUN_IDEMPOTENCY_KEY": ctx.idempotency_key,
    }
    limits = sandbox.limits_of(ctx.settings, timeout_s)
    async with contextlib.AsyncExitStack() as stack:
        door = None
        if confinement.confined and policy_in_force(ctx.settings.policy_file).of(tool).network:
            door = await stack.enter_async_context(egress.door(ctx.settings))
            env.update(egress.environment())
        command = stack.enter_context(
            sandbox.confined_argv(confinement, argv, ctx.workspace, limits, door)
        )
        return await _supervise(
            argv[0],
            command,
            ctx,
            env,
            timeout_s=timeout_s,
            check=check,
            stdin=stdin,
            confined=confinement.confined,
        )
    raise AssertionError("unreachable")  # mypy: an exit stack may swallow exceptions


async def _supervise(
    name: str,
    command: list[str],
    ctx: ToolContext,
    env: dict[str, str],
    *,
    timeout_s: float,
    check: bool,
    stdin: bytes | None,
    confined: bool,
) -> dict[str, Any]:
    """Run `command` (`name` in messages; in a sandbox if `confined`) to its end, its
    timeout or the step's cancellation, with its output capped; nothing it started
    outlives it."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            cwd=ctx.workspace,
            env=env,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise fatal(f"command not found: {name}") from None
    except PermissionError:
        raise fatal(f"command not executable: {name}") from None

    async def collect() -> tuple[tuple[str, bool], tuple[str, bool], int]:
        if stdin is not None and proc.stdin is not None:
            # A command may exit without reading its input; that is its business, not an error.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()
        reading = asyncio.ensure_future(
            asyncio.gather(
                _read_capped(proc.stdout, OUTPUT_CAP_BYTES),
                _read_capped(proc.stderr, OUTPUT_CAP_BYTES),
            )
        )
        exited = asyncio.ensure_future(_exit_of(proc))
        try:
            first: list[asyncio.Future[Any]] = [reading, exited]
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                # The command exited, but children it left in the background hold its
                # output open: stop them (they must not outlive the step) and read the rest.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
            out, err = await reading
        finally:
            exited.cancel()
            reading.cancel()
        return out, err, await proc.wait()

    try:
        (stdout, out_cut), (stderr, err_cut), code = await asyncio.wait_for(collect(), timeout_s)
    except TimeoutError:
        raise fatal(f"{name} timed out after {timeout_s:g}s", type="Timeout") from None
    finally:
        # Kill the whole process group, always: children the command left behind (even after
        # it exited) must not outlive the step, its timeout or its cancellation.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
    if code != 0 and confined:
        refusal = sandbox.exec_failure(stderr, name)
        if refusal is not None:
            raise fatal(refusal)
    if check and code != 0:
        raise fatal(f"{name} exited with {code}: {stderr[-1000:] or stdout[-1000:]}")
    return {"exit_code": code, "stdout": stdout, "stderr": stderr, "truncated": out_cut or err_cut}


class ShellArgs(_Args):
    argv: list[str] = Field(min_length=1, max_length=1000)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    check: bool = True
    stdin: str | None = None
    secret_env: dict[str, SecretRef] = Field(
        default_factory=dict, description="environment variables set from named secrets"
    )


@tool("shell", args=ShellArgs, side_effect=SideEffect.IRREVERSIBLE, exposes_secrets=True)
async def shell(args: ShellArgs, ctx: ToolContext) -> dict[str, Any]:
    """Run a command (an argv list, no shell) in the run's workspace."""
    stdin = args.stdin.encode() if args.stdin is not None else None
    return await _run_process(
        "shell",
        args.argv,
        ctx,
        timeout_s=args.timeout_s,
        check=args.check,
        stdin=stdin,
        secret_env=args.secret_env,
    )


class PythonArgs(_Args):
    code: str = Field(min_length=1, max_length=200_000)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    check: bool = True


@tool("python", args=PythonArgs, side_effect=SideEffect.IRREVERSIBLE)
async def python(args: PythonArgs, ctx: ToolContext) -> dict[str, Any]:
    """Run Python code in a fresh interpreter in the run's workspace."""
    argv = [sys.executable, "-I", "-c", args.code]
    return await _run_process("python", argv, ctx, timeout_s=args.timeout_s, check=args.check)


# --- files ---------------------------------------------------------------------------------


class _PathArgs(_Args):
    path: str = Field(max_length=1024)

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        return check_relative(path)


def _read_head(path: Path, limit: int) -> tuple[bytes, int]:
    with path.open("rb") as f:
        return f.read(limit), os.fstat(f.fileno()).st_size


class ReadFileArgs(_PathArgs):
    max_bytes: int = Field(OUTPUT_CAP_BYTES, gt=0, le=1024 * 1024)


@tool("read_file", args=ReadFileArgs, side_effect=SideEffect.READ_ONLY, quick=True)
async def read_file(args: ReadFileArgs, ctx: ToolContext) -> dict[str, Any]:
    """Read a text file from the run's workspace."""
    target = confine(ctx.workspace, args.path)
    if not target.is_file():
        raise fatal(f"no file '{args.path}' in the run's workspace", type="NotFound")
    data, size = await asyncio.to_thread(_read_head, target, args.max_bytes)
    return {
        "path": args.path,
        "content": data[: args.max_bytes].decode(errors="replace"),
        "bytes": size,
        "truncated": size > args.max_bytes,
    }


class WriteFileArgs(_PathArgs):
    content: str = Field(max_length=10 * 1024 * 1024)

    @field_validator("path")
    @classmethod
    def _not_reserved(cls, path: str) -> str:
        if PurePosixPath(path).parts[:1] == (BACKUPS.parts[0],):
            raise ValueError(f"{BACKUPS.parts[0]}/ is reserved for longrun's own files")
        return path


BACKUPS = Path(".longrun") / "backups"  # inside the workspace: what write_file replaced


def _write_atomically(target: Path, data: bytes) -> None:
    # Write a fresh temporary file (created exclusively, so no planted symlink is
    # followed), then rename it over the target: a retry never sees a half-written file.
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _copy_atomically(source: Path, target: Path) -> None:
    # A copy cut short by a crash must not pass for a backup: copy beside, then rename.
    fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        shutil.copyfile(source, name)
        os.replace(name, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def _undo_write(args: WriteFileArgs, output: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "restore_file", {"path": args.path, "backup": output.get("backup")}


@tool("write_file", args=WriteFileArgs, side_effect=SideEffect.REVERSIBLE, compensate=_undo_write)
async def write_file(args: WriteFileArgs, ctx: ToolContext) -> dict[str, Any]:
    """Write a text file in the run's workspace, atomically, replacing any earlier content."""
    target = confine(ctx.workspace, args.path)
    if target.is_dir():
        raise fatal(f"'{args.path}' is a directory in the run's workspace")
    target.parent.mkdir(parents=True, exist_ok=True)
    # Keep what this step replaces, once: a retry must not back up its own first write.
    backup = BACKUPS / f"{ctx.step_id}.bak"
    (ctx.workspace / BACKUPS).mkdir(parents=True, exist_ok=True)
    saved = confine(ctx.workspace, str(backup))  # the backups folder cannot lead out either
    marker = confine(ctx.workspace, str(BACKUPS / f"{ctx.step_id}.new"))
    if not saved.exists() and not marker.exists():
        if target.is_file():
            await asyncio.to_thread(_copy_atomically, target, saved)
        else:
            marker.touch()
    data = args.content.encode()
    await asyncio.to_thread(_write_atomically, target, data)
    return {
        "path": args.path,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "backup": str(backup) if saved.exists() else None,
    }


class RestoreFileArgs(_PathArgs):
    backup: str | None = Field(None, max_length=1024, description="unset: remove the file")

    @field_validator("backup")
    @classmethod
    def _relative_backup(cls, backup: str | None) -> str | None:
        return None if backup is None else check_relative(backup)


@tool("restore_file", args=RestoreFileArgs, side_effect=SideEffect.IRREVERSIBLE)
async def restore_file(args: RestoreFileArgs, ctx: ToolContext) -> dict[str, Any]:
    """Put back a file's earlier content from a backup, or remove it if it had none."""
    target = confine(ctx.workspace, args.path)
    if args.backup is None:
        target.unlink(missing_ok=True)
        return {"path": args.path, "restored": False, "removed": True}
    source = confine(ctx.workspace, args.backup)
    if not source.is_file():
        raise fatal(f"no backup '{args.backup}' in the run's workspace", type="NotFound")
    data = await asyncio.to_thread(source.read_bytes)
    await asyncio.to_thread(_write_atomically, target, data)
    return {"path": args.path, "restored": True, "removed": False}
