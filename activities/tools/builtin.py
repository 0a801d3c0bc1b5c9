"""The built-in tools at work: each implements a tool the catalogue declares (its arguments,
side effect and undo are longrun/catalogue.py's)."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from activities.errors import fatal, retry_after_seconds, transient
from activities.tools import egress, sandbox
from activities.tools.destinations import Refused, checked_client
from activities.tools.quota import Watch, refuse_write
from activities.tools.registry import ToolContext, implements
from longrun import beneath, grants
from longrun.catalogue import (
    BACKUPS,
    OUTPUT_CAP_BYTES,
    EchoArgs,
    HttpRequestArgs,
    PythonArgs,
    ReadFileArgs,
    RestoreFileArgs,
    SecretRef,
    ShellArgs,
    WriteFileArgs,
)
from longrun.policy import policy_in_force

# Response headers that carry credentials; they would otherwise land in workflow history.
SECRET_HEADERS = frozenset(
    {"set-cookie", "authorization", "proxy-authenticate", "www-authenticate"}
)


# --- echo ----------------------------------------------------------------------------------


@implements("echo")
async def echo(args: EchoArgs, ctx: ToolContext) -> dict[str, Any]:
    """Return `value` unchanged; handy for shaping data between steps."""
    return {"value": args.value}


# --- http_request --------------------------------------------------------------------------


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


@implements("http_request")
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
            checked_client(ctx.settings, timeout_s=args.timeout_s) as client,
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
        # A model that sent GET where the goal said POST reads what to send instead.
        allowed = response.headers.get("allow") if status == 405 else None
        said = f" (it allows {allowed}: set method)" if allowed else ""
        raise fatal(
            f"{args.method} {args.url} answered {status}{said}: {text[:500]}", type="HttpError"
        )
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
    quota = Watch(ctx.settings, ctx.workspace)
    await quota.measure()
    limits = sandbox.limits_of(ctx.settings, timeout_s, quota.left)
    async with contextlib.AsyncExitStack() as stack:
        door = None
        if confinement.confined and policy_in_force(ctx.settings.policy_file).of(tool).network:
            door = await stack.enter_async_context(egress.door(ctx.settings))
            env.update(egress.environment())
        call = stack.enter_context(
            sandbox.confined_argv(confinement, argv, ctx.workspace, limits, door)
        )
        result = await _supervise(
            argv[0],
            call.argv,
            ctx,
            env,
            timeout_s=timeout_s,
            check=check,
            stdin=stdin,
            confined=confinement.confined,
            quota=quota,
        )
        bound = call.bound_passed(limits)
        if bound is not None:
            raise fatal(f"{argv[0]}: {bound}", type="SandboxBound")
        quota.check()
        if check and result["exit_code"] != 0:
            raise fatal(f"{argv[0]} exited with {result['exit_code']}: {ends(result, 1000)}")
        return result
    raise AssertionError("unreachable")  # mypy: an exit stack may swallow exceptions


def ends(output: dict[str, Any], chars: int) -> str:
    """What a process said last, in at most about `chars` characters: the end of its
    stdout and of its stderr, each named when both have something. Test runners and
    compilers report on stdout while warnings fill stderr, so neither alone is enough."""
    streams = {k: str(output.get(k) or "") for k in ("stdout", "stderr")}
    said = {k: v for k, v in streams.items() if v.strip()}
    if len(said) < 2:
        return next(iter(said.values()), "")[-chars:]
    # Each stream gets half; what one does not use, the other may.
    half = chars // 2
    room = {
        k: half + max(0, half - len(said[other]))
        for k, other in (("stdout", "stderr"), ("stderr", "stdout"))
    }
    return "\n".join(f"{k} (end): {v[-room[k] :]}" for k, v in said.items())


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
    quota: Watch,
) -> dict[str, Any]:
    """Run `command` (`name` in messages; in a sandbox if `confined`) to its end, its
    timeout, the step's cancellation or its workspace's quota, with its output capped;
    nothing it started outlives it."""
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

    def stop() -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    try:
        async with quota.watching(stop):
            (stdout, out_cut), (stderr, err_cut), code = await asyncio.wait_for(
                collect(), timeout_s
            )
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
    return {"exit_code": code, "stdout": stdout, "stderr": stderr, "truncated": out_cut or err_cut}


@implements("shell")
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


@implements("python")
async def python(args: PythonArgs, ctx: ToolContext) -> dict[str, Any]:
    """Run Python code in a fresh interpreter in the run's workspace."""
    argv = [sys.executable, "-I", "-c", args.code]
    return await _run_process("python", argv, ctx, timeout_s=args.timeout_s, check=args.check)


# --- files ---------------------------------------------------------------------------------


@implements("read_file")
async def read_file(args: ReadFileArgs, ctx: ToolContext) -> dict[str, Any]:
    """Read a text file from the run's workspace."""
    with _beneath(args.path):
        data, size = await asyncio.to_thread(
            beneath.read_beneath, ctx.workspace, args.path, args.max_bytes
        )
    return {
        "path": args.path,
        "content": data[: args.max_bytes].decode(errors="replace"),
        "bytes": size,
        "truncated": size > args.max_bytes,
    }


@contextlib.contextmanager
def _beneath(path: str) -> Iterator[None]:
    """File errors of `path` in the run's workspace as errors a step reports."""
    try:
        yield
    except beneath.Outside:
        raise fatal(f"path '{path}' leads outside the run's workspace (through a link)") from None
    except (FileNotFoundError, NotADirectoryError):
        raise fatal(f"no file '{path}' in the run's workspace", type="NotFound") from None
    except IsADirectoryError:
        raise fatal(f"'{path}' is a directory in the run's workspace") from None


def _write(workspace: Path, path: str, data: bytes, step_id: str) -> str | None:
    """Write `data` at `path` beneath `workspace` atomically; keep what it replaces, once
    per step (a retry must not back up its own first write). The backup's name, if any."""
    folder_path, name = beneath.split(path)
    with beneath.opened_folder(workspace) as root:
        folder = beneath.folder_beneath(root, folder_path, create=True)
        try:
            kind = beneath.kind_of(folder, name)
            if kind == "link":
                os.close(beneath.open_beneath(root, path, os.O_PATH))  # Outside if it leads out
                raise fatal(f"'{path}' is a link in the run's workspace: write_file writes files")
            if kind not in ("file", None):
                raise IsADirectoryError(path)
            backup = _back_up(root, folder, name, kind == "file", step_id)
            beneath.replace_in(folder, name, data)
            return backup
        finally:
            os.close(folder)


def _back_up(root: int, folder: int, name: str, exists: bool, step_id: str) -> str | None:
    """Keep the file `name` of `folder` as this step's backup, unless the step already kept
    one (or noted that there was none); the backup's name, if any."""
    saved, marker = f"{step_id}.bak", f"{step_id}.new"
    backups = beneath.folder_beneath(root, str(BACKUPS), create=True)
    try:
        if beneath.kind_of(backups, saved) is None and beneath.kind_of(backups, marker) is None:
            if exists:
                beneath.replace_in(backups, saved, beneath.read_in(folder, name))
            else:
                beneath.replace_in(backups, marker, b"")
        return str(BACKUPS / saved) if beneath.kind_of(backups, saved) == "file" else None
    finally:
        os.close(backups)


@implements("write_file")
async def write_file(args: WriteFileArgs, ctx: ToolContext) -> dict[str, Any]:
    """Write a text file in the run's workspace, atomically, replacing any earlier content."""
    data = args.content.encode()
    await asyncio.to_thread(refuse_write, ctx.settings, ctx.workspace, len(data))
    with _beneath(args.path):
        backup = await asyncio.to_thread(_write, ctx.workspace, args.path, data, ctx.step_id)
    return {
        "path": args.path,
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "backup": backup,
    }


@implements("restore_file")
async def restore_file(args: RestoreFileArgs, ctx: ToolContext) -> dict[str, Any]:
    """Put back a file's earlier content from a backup, or remove it if it had none."""
    with _beneath(args.path):
        restored = await asyncio.to_thread(_restore, ctx.workspace, args.path, args.backup)
    return {"path": args.path, "restored": restored, "removed": not restored}


def _restore(workspace: Path, path: str, backup: str | None) -> bool:
    """Put `backup`'s content at `path` (both beneath `workspace`), or remove `path`."""
    folder_path, name = beneath.split(path)
    with beneath.opened_folder(workspace) as root:
        if backup is None:
            try:
                folder = beneath.folder_beneath(root, folder_path)
            except FileNotFoundError:
                return False
            try:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=folder)
            finally:
                os.close(folder)
            return False
        source_path, source_name = beneath.split(backup)
        source = beneath.folder_beneath(root, source_path)
        try:
            try:
                data = beneath.read_in(source, source_name)
            except FileNotFoundError:
                raise fatal(
                    f"no backup '{backup}' in the run's workspace", type="NotFound"
                ) from None
        finally:
            os.close(source)
        folder = beneath.folder_beneath(root, folder_path, create=True)
        try:
            beneath.replace_in(folder, name, data)
        finally:
            os.close(folder)
    return True
