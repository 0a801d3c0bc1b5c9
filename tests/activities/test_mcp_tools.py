"""MCP servers' tools in runs: real servers from PyPI (mcp-server-time and mcp-server-git
over stdio, mcp-server-time behind mcp-proxy over streamable HTTP) called by plan steps
and by an agent on the stand-in, gated by their side-effect class, checked at submission,
and started again when they die."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from temporalio.client import Client
from temporalio.worker import Worker

from activities.mcp import McpHub
from longrun.dev.stack import free_port
from longrun.mcp_servers import load_mcp_servers
from longrun.settings import Settings
from tests.helpers import REPO, Poll, StandIn, submit
from tests.workflows.test_replay import replays_and_is_kept
from worker import serving

BIN = Path(sys.executable).parent
MCP_PROXY = BIN.parent / "mcp-proxy" / "bin" / "mcp-proxy"  # Makefile: `make unit`
TOKEN = "proxy-token-4d1f"


@pytest.fixture(scope="module")
def proxy_url() -> Iterator[str]:
    """mcp-server-time served over streamable HTTP by mcp-proxy, as its own process."""
    assert MCP_PROXY.exists(), f"{MCP_PROXY} is missing: `make unit` installs it"
    port = free_port()
    proc = subprocess.Popen(
        [str(MCP_PROXY), "--port", str(port), "--", str(BIN / "mcp-server-time")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/status", timeout=1)
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, "mcp-proxy died"
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="module")
def mute_url() -> Iterator[str]:
    """A server that accepts connections and never answers."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/mcp"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit."""
    path = tmp_path / "repo"
    path.mkdir()
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (path / "README").write_text("hello\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    return path


@pytest.fixture
def settings(
    settings: Settings, tmp_path: Path, repo: Path, proxy_url: str, mute_url: str
) -> Settings:
    """conftest's settings with four MCP servers; its worker, API and run fixtures take them."""
    servers = {
        "servers": {
            "time": {
                "transport": "stdio",
                "command": [str(BIN / "mcp-server-time"), "--local-timezone", "UTC"],
                "side_effects": {"get_current_time": "read_only", "convert_time": "read_only"},
            },
            "git": {
                "transport": "stdio",
                "command": [str(BIN / "mcp-server-git"), "--repository", str(repo)],
                "tools": ["git_status", "git_log", "git_create_branch"],
                "side_effects": {"git_status": "read_only", "git_log": "read_only"},
            },
            "clock": {
                "transport": "streamable-http",
                "url": proxy_url,
                "headers": {"X-Token": {"secret": "clock_token"}},
            },
            "gone": {"transport": "streamable-http", "url": f"http://127.0.0.1:{free_port()}/mcp"},
            # Takes the connection and never answers.
            "mute": {"transport": "streamable-http", "url": mute_url, "timeout_s": 1},
        }
    }
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(servers))
    return settings.model_copy(
        update={"mcp_servers_file": path, "secrets": {"clock_token": SecretStr(TOKEN)}}
    )


def _children_named(name: str) -> list[int]:
    """Processes started by this one that run `name` (its first arguments: the script, or
    the interpreter and the script; not a process that names it further on, as mcp-proxy
    does the server it serves)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and any(name in arg for arg in argv[:2]):
            found.append(int(proc.name))
    return found


async def test_plan_steps_call_mcp_tools_over_stdio_and_http(
    api: httpx.AsyncClient, client: Client, worker: Worker, wait_run: Poll, repo: Path
) -> None:
    steps: list[dict[str, Any]] = [
        {"id": "now", "tool": "mcp.time.get_current_time", "args": {"timezone": "Asia/Tokyo"}},
        {"id": "status", "tool": "mcp.git.git_status", "args": {"repo_path": str(repo)}},
        {"id": "log", "tool": "mcp.git.git_log", "args": {"repo_path": str(repo)}},
        {
            "id": "where",
            "tool": "echo",
            "args": {"value": "{{steps.now.output.structured.timezone}}"},
        },
        # Over streamable HTTP, with a header naming a secret; irreversible unless the
        # file says otherwise, so it waits for a person.
        {
            "id": "remote",
            "tool": "mcp.clock.convert_time",
            "args": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Kolkata"},
        },
    ]
    run_id = await submit(api, steps)
    run = await wait_run(run_id, until=lambda r: r["pending_approvals"])
    assert [a["step_id"] for a in run["pending_approvals"]] == ["remote"]
    decided = await api.post(
        f"/v1/runs/{run_id}/approvals/apr-remote", json={"decision": "approve"}
    )
    assert decided.status_code == 202, decided.text
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    out = {s["id"]: s["output"] for s in run["steps"]}
    assert out["now"]["structured"]["timezone"] == "Asia/Tokyo"
    assert "working tree clean" in out["status"]["text"]
    assert "first commit" in out["log"]["text"]
    assert out["where"] == {"value": "Asia/Tokyo"}
    assert out["remote"]["structured"]["target"]["timezone"] == "Asia/Kolkata"
    assert TOKEN not in json.dumps(run)
    # Its history replays, and is kept beside the others (tests/workflows/test_replay.py).
    await replays_and_is_kept(client, run_id, "mcp_tools_plan")


async def test_the_tool_list_shows_mcp_tools_and_what_is_unreachable(
    api: httpx.AsyncClient,
) -> None:
    listed = (await api.get("/v1/tools")).json()
    tools = {t["name"]: t for t in listed["tools"]}
    assert tools["mcp.time.get_current_time"]["side_effect"] == "read_only"
    assert tools["mcp.clock.get_current_time"]["side_effect"] == "irreversible"
    assert "timezone" in tools["mcp.time.get_current_time"]["args_schema"]["properties"]
    # Only the tools the file exposes.
    git = sorted(n for n in tools if n.startswith("mcp.git."))
    assert git == ["mcp.git.git_create_branch", "mcp.git.git_log", "mcp.git.git_status"]
    assert tools["echo"]["side_effect"] == "read_only"
    unavailable = sorted(listed["unavailable"])
    assert len(unavailable) == 2, unavailable
    assert "'gone' could not be reached" in unavailable[0]
    assert "'mute' did not list its tools within 1 s" in unavailable[1]


async def test_bad_mcp_steps_are_refused_before_anything_runs(
    api: httpx.AsyncClient,
) -> None:
    async def refused(step: dict[str, Any]) -> httpx.Response:
        body = {"goal": "bad", "plan": {"steps": [{"id": "s", **step}]}}
        return await api.post("/v1/runs", json=body)

    wrong_args = await refused({"tool": "mcp.time.get_current_time", "args": {"tz": "UTC"}})
    assert wrong_args.status_code == 422
    detail = wrong_args.json()["detail"]
    assert any("'timezone' is a required property" in d["msg"] for d in detail), detail
    hidden = await refused({"tool": "mcp.git.git_commit", "args": {}})  # not exposed
    assert hidden.status_code == 422 and "unknown tool" in hidden.text
    no_server = await refused({"tool": "mcp.nowhere.tool", "args": {}})
    assert no_server.status_code == 422 and "unknown tool" in no_server.text
    down = await refused({"tool": "mcp.gone.anything", "args": {}})
    assert down.status_code == 503 and "'gone' could not be reached" in down.text
    mute = await refused({"tool": "mcp.mute.anything", "args": {}})
    assert mute.status_code == 503 and "'mute' did not list its tools" in mute.text
    checked = await api.post(
        "/v1/runs",
        json={
            "goal": "g",
            "acceptance": [
                {
                    "id": "c",
                    "check": {
                        "tool": "mcp.time.get_current_time",
                        "args": {"timezone": "UTC"},
                        "expect": {"contains": "UTC"},
                    },
                }
            ],
        },
    )
    assert checked.status_code == 422 and "an MCP tool cannot be a check" in checked.text


async def test_a_stdio_server_that_dies_is_started_again(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    step = {"tool": "mcp.time.get_current_time", "args": {"timezone": "UTC"}}
    first = await wait_run(await submit(api, [{"id": "a", **step}]))
    assert first["status"] == "completed", first
    servers = _children_named("mcp-server-time")
    assert servers, "the worker's time server is not running"
    for pid in servers:
        os.kill(pid, signal.SIGKILL)
    second = await wait_run(await submit(api, [{"id": "b", **step}]))
    assert second["status"] == "completed", second
    # The first attempt met the dead server; the second started a new one.
    assert second["steps"][0]["attempts"] == 2
    assert second["steps"][0]["output"]["structured"]["timezone"] == "UTC"
    assert set(_children_named("mcp-server-time")).isdisjoint(servers)


async def test_an_agent_calls_mcp_tools_by_their_function_names(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [
            {
                "match": "agent-mcp",
                "role": "plan",
                "json": {
                    "steps": [
                        {"id": "time", "intent": "find the time", "expected_evidence": "a time"}
                    ]
                },
            },
            {
                "match": "agent-mcp",
                "role": "act",
                "times": 1,
                "tool_calls": [
                    {"name": "mcp__time__get_current_time", "arguments": {"timezone": "UTC"}}
                ],
            },
            {"match": "agent-mcp", "role": "act", "times": 1, "reply": "it is now"},
        ]
    )
    response = await api.post(
        "/v1/runs",
        json={
            "goal": "agent-mcp: tell the time",
            "acceptance": [{"id": "said", "check": {"judge": "the time was read"}}],
            "tools": ["mcp.time.get_current_time"],
        },
    )
    assert response.status_code == 202, response.text
    run = await wait_run(response.json()["run_id"])
    assert run["status"] == "completed", run
    acts = standin.calls("agent-mcp", role="act")
    assert "mcp__time__get_current_time" in acts[0]["tools"]
    called = [s for s in run["steps"] if s["kind"] == "tool"]
    assert called[0]["status"] == "completed"
    assert called[0]["output"]["structured"]["timezone"] == "UTC"


async def test_a_servers_new_tools_are_listed_after_it_says_they_changed(
    tmp_path: Path,
) -> None:
    """The hub keeps a server's tool list until the server sends list_changed: then the
    next listing asks again and finds the tool it added."""
    server = REPO / "tests" / "servers" / "growing_mcp.py"
    config = {"servers": {"grow": {"transport": "stdio", "command": [sys.executable, str(server)]}}}
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps(config))
    hub = McpHub(load_mcp_servers(path), {})
    try:
        tools, problems = await hub.tools()
        assert problems == [] and [t.name for t in tools] == ["mcp.grow.grow"]
        out = await hub.call("mcp.grow.grow", {"name": "fresh"}, "test:grow")
        assert out["text"] == "added fresh"
        for _ in range(100):
            tools, _ = await hub.tools()
            if "mcp.grow.fresh" in [t.name for t in tools]:
                break
            await asyncio.sleep(0.05)
        assert sorted(t.name for t in tools) == ["mcp.grow.fresh", "mcp.grow.grow"]
        assert (await hub.call("mcp.grow.fresh", {}, "test:fresh"))["text"] == "fresh"
    finally:
        await hub.aclose()


async def test_a_secret_missing_on_the_worker_fails_the_step_at_once(
    api: httpx.AsyncClient, client: Client, settings: Settings, wait_run: Poll
) -> None:
    """The API holds the secret a server's header names (so it lists the tools); a worker
    without it fails the step on its first attempt, saying which secret is missing."""
    without = settings.model_copy(update={"secrets": {}})
    async with serving(client, without):
        run_id = await submit(
            api,
            [
                {
                    "id": "now",
                    "tool": "mcp.clock.get_current_time",
                    "args": {"timezone": "UTC"},
                    "requires_approval": False,
                }
            ],
        )
        run = await wait_run(run_id)
    assert run["status"] == "failed"
    [step] = run["steps"]
    assert step["attempts"] == 1
    assert "names the secret 'clock_token'" in step["error"]
