"""The built-in tools, run as real Temporal activities in `ActivityEnvironment` (no server)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import uuid
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.tools.bound import build_tool_activities
from activities.verify import evaluate
from longrun.catalogue import CATALOGUE
from longrun.contracts import Expect, SideEffect, ToolCall
from longrun.dev.stack import ServerThread
from longrun.settings import Settings
from tests.helpers import sleep_for, sleeping

BAD_PATHS = ["/etc/passwd", "../escaped.txt", "a/../../escaped.txt", "~/escaped.txt"]


class Tools:
    """Calls `tool.<name>` activities for one run."""

    def __init__(self, settings: Settings, run_id: str) -> None:
        self.settings = settings
        self.run_id = run_id
        self.fns: dict[str, Callable[..., Any]] = {
            activity._Definition.must_from_callable(fn).name: fn
            for fn in build_tool_activities(settings)
        }

    async def run(self, name: str, env: ActivityEnvironment | None = None, **args: Any) -> Any:
        call = ToolCall(run_id=self.run_id, step_id="s1", idempotency_key="k", args=args)
        result = await (env or ActivityEnvironment()).run(self.fns[f"tool.{name}"], call)
        assert result.attempt == 1
        return result.output

    async def fail(self, name: str, **args: Any) -> ApplicationError:
        with pytest.raises(ApplicationError) as info:
            await self.run(name, **args)
        assert info.value.details[0]["attempt"] == 1
        return info.value


def alive(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie nobody reaped counts as dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def eventually(check: Callable[[], Any], failure: str) -> Any:
    """The first truthy value of `check()` within about five seconds."""
    for _ in range(250):
        if value := check():
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(failure)


async def pid_of(duration: str) -> int:
    pids = await eventually(lambda: sleeping(duration), f"no sleep {duration} started")
    return int(pids[0])


async def assert_gone(pid: int) -> None:
    await eventually(lambda: not alive(pid), f"process {pid} outlived the tool call")


async def assert_gone_or_kill_all(duration: str) -> None:
    """Assert no `sleep <duration>` is left, killing any that is."""
    try:
        await eventually(lambda: not sleeping(duration), f"sleep {duration} outlived the call")
    finally:
        for pid in sleeping(duration):
            os.kill(pid, 9)


async def assert_gone_or_kill(pid: int) -> None:
    """Assert the process is gone, killing it if it is not (so no test leaves it behind)."""
    try:
        await assert_gone(pid)
    finally:
        if alive(pid):
            os.kill(pid, 9)


@pytest.fixture
def cfg(tmp_path: Path, http_url: str) -> Settings:
    return Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_DATA_DIR=tmp_path,
        LONGRUN_HTTP_ALLOW_HOSTS=http_url.removeprefix("http://"),
    )


@pytest.fixture
def tools(cfg: Settings) -> Tools:
    return Tools(cfg, "run-" + uuid.uuid4().hex)


@pytest.fixture
def workspace(cfg: Settings, tools: Tools) -> Path:
    path = cfg.workspaces_dir / tools.run_id / "workspace"
    path.mkdir(parents=True)
    return path


ROUTES: dict[str, Callable[[Request], Response]] = {
    "/echo": lambda r: JSONResponse({"key": r.headers.get("idempotency-key")}),
    "/busy": lambda r: PlainTextResponse("busy", status_code=503, headers={"Retry-After": "7"}),
    "/missing": lambda r: PlainTextResponse("no such thing", status_code=404),
    "/big": lambda r: PlainTextResponse("x" * 200_000),
    "/fail": lambda r: PlainTextResponse("boom", status_code=500),
}


async def _slow(request: Request) -> Response:
    await asyncio.sleep(2)
    return PlainTextResponse("late")


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    methods = ["GET", "POST", "PUT"]
    routes = [Route(path, fn, methods=methods) for path, fn in ROUTES.items()]
    app = Starlette(routes=[*routes, Route("/slow", _slow, methods=methods)])
    with ServerThread(app) as server:
        yield server.url


# --- files ---------------------------------------------------------------------------------


async def test_file_round_trip_in_the_run_workspace(tools: Tools, tmp_path: Path) -> None:
    written = await tools.run("write_file", path="notes/a.txt", content="héllo\n")
    data = "héllo\n".encode()
    sha256 = hashlib.sha256(data).hexdigest()
    assert written == {"path": "notes/a.txt", "bytes": len(data), "sha256": sha256, "backup": None}
    on_disk = tmp_path / "runs" / tools.run_id / "workspace" / "notes" / "a.txt"
    assert on_disk.read_bytes() == data
    read = await tools.run("read_file", path="notes/a.txt")
    assert read == {"path": "notes/a.txt", "content": "héllo\n", "bytes": 7, "truncated": False}
    # Writing again keeps what the first write replaced, for an undo.
    again = await tools.run("write_file", path="notes/a.txt", content="second")
    assert again["backup"] is None  # same step: its backup is of the state before its first try


@pytest.mark.parametrize("tool", ["read_file", "write_file"])
@pytest.mark.parametrize("path", BAD_PATHS)
async def test_paths_outside_the_workspace_are_invalid_args(
    tools: Tools, tmp_path: Path, tool: str, path: str
) -> None:
    extra = {"content": "x"} if tool == "write_file" else {}
    err = await tools.fail(tool, path=path, **extra)
    assert err.type == "InvalidArgs" and err.non_retryable
    assert "invalid arguments" in err.message and "path" in err.message
    assert not list(tmp_path.rglob("escaped.txt"))


async def test_symlink_escape_refused(tools: Tools, workspace: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (workspace / "dir_link").symlink_to(outside)
    (workspace / "file_link").symlink_to(outside / "secret.txt")
    for path in ["dir_link/secret.txt", "file_link"]:
        err = await tools.fail("read_file", path=path)
        assert err.non_retryable and "leads outside the run's workspace" in err.message
    for path in ["dir_link/new.txt", "file_link", "dir_link/sub/new.txt"]:
        err = await tools.fail("write_file", path=path, content="pwned")
        assert err.non_retryable and "leads outside the run's workspace" in err.message
    assert sorted(p.name for p in outside.rglob("*")) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "secret"


async def test_read_of_a_missing_file_is_a_clear_fatal_error(tools: Tools) -> None:
    err = await tools.fail("read_file", path="nope.txt")
    assert err.non_retryable and err.type == "NotFound"
    assert err.message == "no file 'nope.txt' in the run's workspace"


async def test_read_truncates_at_max_bytes(tools: Tools) -> None:
    await tools.run("write_file", path="digits.txt", content="0123456789" * 10)
    read = await tools.run("read_file", path="digits.txt", max_bytes=10)
    assert read["content"] == "0123456789"
    assert read["bytes"] == 100 and read["truncated"] is True


@pytest.mark.parametrize("path", [".", "sub"])
async def test_write_onto_a_directory_is_fatal(tools: Tools, workspace: Path, path: str) -> None:
    (workspace / "sub").mkdir()
    err = await tools.fail("write_file", path=path, content="x")
    assert err.non_retryable, err.message
    left = sorted(str(p.relative_to(workspace.parent)) for p in workspace.parent.rglob("*"))
    assert left == ["workspace", "workspace/sub"], "a temporary file was left behind"


# --- shell and python ----------------------------------------------------------------------


async def test_shell_runs_argv_in_the_workspace(tools: Tools, workspace: Path) -> None:
    out = await tools.run("shell", argv=["sh", "-c", "pwd; echo made > made.txt"])
    assert out["exit_code"] == 0 and out["truncated"] is False
    assert out["stdout"] == "/workspace\n"  # the sandbox's name for it
    assert (workspace / "made.txt").read_text() == "made\n"


async def test_shell_nonzero_exit(tools: Tools) -> None:
    argv = ["sh", "-c", "echo oops >&2; exit 3"]
    err = await tools.fail("shell", argv=argv)
    assert err.non_retryable and "sh exited with 3" in err.message and "oops" in err.message
    out = await tools.run("shell", argv=argv, check=False)
    assert out["exit_code"] == 3 and out["stderr"] == "oops\n"


async def test_a_failed_command_says_the_end_of_both_its_streams(tools: Tools) -> None:
    """As pytest does: its verdict on stdout, plugin warnings filling stderr. A model told
    only stderr's end ran the same empty test suite six times on a real server."""
    warn = "yes 'DeprecationWarning: unset option' | head -c 5000 >&2"
    script = f"echo 'no tests ran in 0.01s'; {warn}; exit 5"
    err = await tools.fail("shell", argv=["sh", "-c", script])
    assert "sh exited with 5" in err.message
    assert "stdout (end): no tests ran in 0.01s" in err.message, err.message
    assert "stderr (end): " in err.message and "DeprecationWarning" in err.message
    assert len(err.message) < 1200


def test_a_failed_check_shows_the_end_of_both_streams(workspace: Path) -> None:
    output = {"exit_code": 5, "stdout": "no tests ran in 0.01s\n", "stderr": "warning\n" * 500}
    verdict = evaluate(Expect(exit_code=0), output, None, workspace)
    assert not verdict.passed
    assert "exit code 5, expected 0" in verdict.evidence
    assert "stdout (end): no tests ran" in verdict.evidence, verdict.evidence


async def test_shell_output_is_capped_at_64_kib(tools: Tools) -> None:
    # A short first chunk, so a cap applied per chunk rather than in total would show.
    out = await tools.run("shell", argv=["sh", "-c", "printf x; sleep 0.05; yes | head -c 200000"])
    # Above the artifact threshold, so the activity returns a reference to the output.
    assert out["stdout"]["bytes"] == 64 * 1024 and out["truncated"] is True
    assert out["stdout"]["preview"].startswith("xy\n")


async def test_shell_timeout_kills_the_command(tools: Tools) -> None:
    duration = sleep_for()
    task = asyncio.create_task(
        tools.fail("shell", argv=["sh", "-c", f"exec sleep {duration}"], timeout_s=1)
    )
    pid = await pid_of(duration)
    err = await task
    assert err.non_retryable and err.type == "Timeout"
    assert err.message == "sh timed out after 1s"
    await assert_gone(pid)


async def test_shell_timeout_kills_background_children_too(tools: Tools) -> None:
    # The leader keeps running and its child holds stdout open until the timeout.
    duration = sleep_for()
    argv = ["sh", "-c", f"sleep {duration} & sleep 30"]
    task = asyncio.create_task(tools.fail("shell", argv=argv, timeout_s=1))
    pid = await pid_of(duration)
    assert (await task).type == "Timeout"
    await assert_gone_or_kill(pid)


async def test_shell_ends_when_the_command_exits_and_stops_what_it_left_behind(
    tools: Tools, workspace: Path
) -> None:
    # The leader exits at once, its background child holding stdout open: the step is
    # done when the command is, with what it printed, and the child does not outlive it.
    duration = sleep_for()
    argv = ["sh", "-c", f"sleep {duration} & echo started"]
    out = await tools.run("shell", argv=argv, timeout_s=5)
    assert (out["exit_code"], out["stdout"]) == (0, "started\n")
    await assert_gone_or_kill_all(duration)


async def test_shell_unknown_command(tools: Tools) -> None:
    err = await tools.fail("shell", argv=["no-such-command-xyz"])
    assert err.non_retryable and err.message == "command not found: no-such-command-xyz"


async def test_shell_stdin_the_command_does_not_read_is_not_an_error(tools: Tools) -> None:
    out = await tools.run("shell", argv=["true"], stdin="x" * 1_000_000)
    assert out["exit_code"] == 0


async def test_shell_env_has_no_secrets(tools: Tools, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-test")
    lines = (await tools.run("shell", argv=["env"]))["stdout"].splitlines()
    assert "LONGRUN_IDEMPOTENCY_KEY=k" in lines and f"LONGRUN_RUN_ID={tools.run_id}" in lines
    assert not [line for line in lines if "sk-secret-test" in line or "OPENAI" in line]


async def test_python_runs_code(tools: Tools) -> None:
    out = await tools.run("python", code="import os; print(6 * 7, os.getcwd() != '/')")
    assert out["stdout"] == "42 True\n" and out["exit_code"] == 0


async def test_python_exception_is_an_error(tools: Tools) -> None:
    err = await tools.fail("python", code="raise ValueError('boom')")
    assert err.non_retryable and "exited with 1" in err.message
    assert "ValueError: boom" in err.message


async def test_cancel_ends_the_tool_and_its_process(tools: Tools) -> None:
    env = ActivityEnvironment()
    duration = sleep_for()
    argv = ["sh", "-c", f"exec sleep {duration}"]
    task = asyncio.create_task(tools.run("shell", env=env, argv=argv))
    pid = await pid_of(duration)
    assert alive(pid)
    env.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    await assert_gone(pid)


# --- http_request --------------------------------------------------------------------------


async def test_http_get_json_with_idempotency_key(tools: Tools, http_url: str) -> None:
    out = await tools.run("http_request", url=f"{http_url}/echo")
    assert out["status"] == 200 and out["truncated"] is False
    assert out["json"] == {"key": "k"} and '"key"' in out["body"]


async def test_http_503_is_retryable_and_honours_retry_after(tools: Tools, http_url: str) -> None:
    err = await tools.fail("http_request", url=f"{http_url}/busy")
    assert not err.non_retryable and "503" in err.message and "busy" in err.message
    assert err.next_retry_delay == timedelta(seconds=7)


async def test_http_404(tools: Tools, http_url: str) -> None:
    err = await tools.fail("http_request", url=f"{http_url}/missing")
    assert err.non_retryable and err.type == "HttpError"
    assert "answered 404" in err.message
    out = await tools.run("http_request", url=f"{http_url}/missing", raise_for_status=False)
    assert out["status"] == 404 and out["body"] == "no such thing"
    # A method the server does not take: the answer says which it does.
    err = await tools.fail("http_request", url=f"{http_url}/echo", method="DELETE")
    assert err.non_retryable and "answered 405 (it allows " in err.message, err.message
    assert "POST" in err.message.split(": set method")[0]


async def test_http_body_is_truncated(tools: Tools, http_url: str) -> None:
    out = await tools.run("http_request", url=f"{http_url}/big", max_response_bytes=1000)
    assert out["truncated"] is True and out["body"] == "x" * 1000


async def test_http_host_not_allowed(tools: Tools) -> None:
    err = await tools.fail("http_request", url="http://example.com/")
    assert err.non_retryable and err.type == "DestinationRefused"
    assert "'example.com:80' is not an allowed destination" in err.message
    assert "add it to LONGRUN_HTTP_ALLOW_HOSTS as host:port" in err.message


async def test_http_allow_list_entries_name_a_port(tmp_path: Path, http_url: str) -> None:
    port = int(http_url.rsplit(":", 1)[1])
    with pytest.raises(ValueError, match=r"'127\.0\.0\.1' names no port"):
        Settings(_env_file=None, LONGRUN_HTTP_ALLOW_HOSTS="127.0.0.1")  # type: ignore[call-arg]
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_DATA_DIR=tmp_path,
        LONGRUN_HTTP_ALLOW_HOSTS=f"127.0.0.1:{port}",
    )
    tools = Tools(settings, "run-" + uuid.uuid4().hex)
    assert (await tools.run("http_request", url=f"{http_url}/echo"))["status"] == 200
    err = await tools.fail("http_request", url=f"http://127.0.0.1:{port + 1}/echo")
    assert f"'127.0.0.1:{port + 1}' is not an allowed destination" in err.message


async def test_http_never_calls_longrun_itself_even_when_listed(tmp_path: Path) -> None:
    # Temporal, its HTTP API, its Web UI and the API, each allowed by name: still refused.
    urls = (
        "http://127.0.0.1:7233/",
        "http://127.0.0.1:7243/api/v1/namespaces/default/workflows",
        "http://localhost:8233/namespaces",
        "http://127.0.0.1:8000/v1/runs",
    )
    listed = ",".join(httpx.URL(url).netloc.decode() for url in urls)
    settings = Settings(
        _env_file=None,  # type: ignore[call-arg]
        LONGRUN_DATA_DIR=tmp_path,
        LONGRUN_HTTP_ALLOW_HOSTS=listed,
    )
    tools = Tools(settings, "run-" + uuid.uuid4().hex)
    for url in urls:
        err = await tools.fail("http_request", url=url)
        assert err.non_retryable and "which runs never reach" in err.message, url


async def test_http_headers_that_frame_the_request_are_refused(tools: Tools, http_url: str) -> None:
    err = await tools.fail("http_request", url=f"{http_url}/echo", headers={"Host": "inside"})
    assert err.type == "InvalidArgs" and "set from the url" in err.message


async def test_a_post_that_may_have_been_sent_is_not_sent_again(
    tools: Tools, http_url: str
) -> None:
    for path, timeout in (("/slow", 0.3), ("/fail", 30.0)):
        err = await tools.fail(
            "http_request", url=http_url + path, method="POST", timeout_s=timeout
        )
        assert err.non_retryable and err.type == "MaybeSent", err.message
        assert "retry_if_sent" in err.message
    # A server that says it did nothing (503), an idempotent method, or a step that says
    # the server honours Idempotency-Key: retried.
    err = await tools.fail("http_request", url=f"{http_url}/busy", method="POST")
    assert not err.non_retryable
    err = await tools.fail("http_request", url=f"{http_url}/slow", method="PUT", timeout_s=0.3)
    assert not err.non_retryable
    err = await tools.fail(
        "http_request", url=f"{http_url}/slow", method="POST", timeout_s=0.3, retry_if_sent=True
    )
    assert not err.non_retryable


async def test_http_non_http_scheme_is_invalid_args(tools: Tools) -> None:
    err = await tools.fail("http_request", url="file:///etc/passwd")
    assert err.type == "InvalidArgs" and err.non_retryable
    assert "url must start with http:// or https://" in err.message


# --- registry ------------------------------------------------------------------------------


def test_every_tool_is_described_and_classified(tools: Tools) -> None:
    assert set(tools.fns) == {f"tool.{name}" for name in CATALOGUE}
    assert {"echo", "http_request", "shell", "python", "read_file", "write_file"} <= set(CATALOGUE)
    for spec in CATALOGUE.values():
        assert issubclass(spec.args_model, BaseModel), spec.name
        assert spec.description.strip() and "\n" not in spec.description, spec.name
        assert isinstance(spec.side_effect, SideEffect) or callable(spec.side_effect)


def test_side_effect_classes() -> None:
    def effect(name: str, **args: Any) -> SideEffect:
        spec = CATALOGUE[name]
        return spec.side_effect_of(spec.args_model.model_validate(args))

    url = "http://127.0.0.1/"
    assert effect("http_request", url=url) is SideEffect.READ_ONLY
    assert effect("http_request", url=url, method="POST") is SideEffect.IRREVERSIBLE
    assert effect("shell", argv=["true"]) is SideEffect.IRREVERSIBLE
    assert effect("python", code="pass") is SideEffect.IRREVERSIBLE
    assert effect("write_file", path="a", content="") is SideEffect.REVERSIBLE
    assert effect("read_file", path="a") is SideEffect.READ_ONLY


async def test_write_file_keeps_a_backup_that_restore_file_puts_back(
    tools: Tools, workspace: Path
) -> None:
    (workspace / "b.txt").write_text("original")
    written = await tools.run("write_file", path="b.txt", content="changed")
    assert written["backup"] == ".longrun/backups/s1.bak"
    assert (workspace / "b.txt").read_text() == "changed"
    restored = await tools.run("restore_file", path="b.txt", backup=written["backup"])
    assert restored["restored"] is True
    assert (workspace / "b.txt").read_text() == "original"
    removed = await tools.run("restore_file", path="b.txt")
    assert removed["removed"] is True and not (workspace / "b.txt").exists()
    err = await tools.fail("restore_file", path="b.txt", backup="../../etc/passwd")
    assert err.type == "InvalidArgs"


async def test_a_backup_cut_short_is_not_taken_for_one(tools: Tools, workspace: Path) -> None:
    # A worker that died while copying left a partial copy beside the backup's name.
    (workspace / "c.txt").write_text("x" * 100_000)
    backups = workspace / ".longrun" / "backups"
    backups.mkdir(parents=True)
    (backups / ".s1.bak.crashed.tmp").write_text("x" * 10)
    written = await tools.run("write_file", path="c.txt", content="new")
    assert (workspace / written["backup"]).read_text() == "x" * 100_000


async def test_a_retry_that_finds_no_workspace_says_it_was_lost(
    tools: Tools, cfg: Settings
) -> None:
    retry = ActivityEnvironment()
    retry.info = dataclasses.replace(retry.info, attempt=2)
    call = ToolCall(run_id=tools.run_id, step_id="s1", idempotency_key="k", args={"argv": ["true"]})
    with pytest.raises(ApplicationError) as info:
        await retry.run(tools.fns["tool.shell"], call)
    assert info.value.type == "WorkspaceLost" and info.value.non_retryable
    assert "workers must share LONGRUN_DATA_DIR" in info.value.message
    assert not (cfg.workspaces_dir / tools.run_id).exists()  # nothing made in its place
    # So does the next step of a run whose earlier step ran in it.
    later = ToolCall(
        run_id=tools.run_id,
        step_id="s2",
        idempotency_key="k2",
        args={"argv": ["true"]},
        workspace_used=True,
    )
    with pytest.raises(ApplicationError) as info:
        await ActivityEnvironment().run(tools.fns["tool.shell"], later)
    assert info.value.type == "WorkspaceLost" and "an earlier step had it" in info.value.message
    # A first attempt makes it; a retry on a worker that shares it carries on.
    await tools.run("write_file", path="made.txt", content="x")
    result = await retry.run(tools.fns["tool.shell"], call)
    assert result.output["exit_code"] == 0
