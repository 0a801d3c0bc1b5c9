"""longrun as an MCP server: an MCP client (the official `mcp` SDK) hands a run to
`longrun mcp` over stdio, follows its events, decides its approval through the inbox and
reads it completed; what the API refuses comes back as a tool error. At the API's `/mcp`
(streamable HTTP) the tools act with the key the MCP client sent, and nothing is served
without one."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from temporalio.worker import Worker

from longrun.settings import Settings, hash_key
from tests.helpers import REPO, api_process

PLAN = {
    "steps": [
        {"id": "hello", "tool": "echo", "args": {"value": "hi"}},
        {"id": "gate", "approval": {"message": "go on?"}, "depends_on": ["hello"]},
        {"id": "bye", "tool": "echo", "args": {"value": "bye"}, "depends_on": ["gate"]},
    ]
}


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    with api_process(settings, tmp_path) as url:
        yield url


def _server(api_url: str) -> StdioServerParameters:
    env = {**os.environ, "LONGRUN_API_URL": api_url, "PYTHONPATH": str(REPO)}
    return StdioServerParameters(command=sys.executable, args=["-m", "longrun.cli", "mcp"], env=env)


async def _call(client: Client, tool: str, **args: Any) -> Any:
    result = await client.call_tool(tool, args)
    assert not result.is_error, result.content
    return result.structured_content


async def test_an_mcp_client_submits_follows_and_approves_a_run(
    api_url: str, worker: Worker
) -> None:
    async with Client(_server(api_url), read_timeout_seconds=60) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        assert {"submit_run", "run_status", "run_events", "list_approvals"} <= tools
        assert {"decide_approval", "cancel_run"} <= tools

        created = await _call(client, "submit_run", goal="mcp: echo, ask, echo", plan=PLAN)
        run_id = created["run_id"]
        seen: list[dict[str, Any]] = []
        after = 0
        while not any(e["type"] == "approval.requested" for e in seen):
            page = await _call(client, "run_events", run_id=run_id, after=after, wait_s=5)
            seen += page["events"]
            after = page["next_after"]
            assert not page["ended"], seen
        assert [e["id"] for e in seen] == list(range(1, len(seen) + 1))  # each once, in order

        status = await _call(client, "run_status", run_id=run_id)
        assert status["status"] == "waiting_approval"
        assert status["steps_done"] == 1 and status["steps_total"] == 3
        inbox = await _call(client, "list_approvals")
        [waiting] = [a for a in inbox["approvals"] if a["run_id"] == run_id]
        await _call(
            client,
            "decide_approval",
            run_id=run_id,
            approval_id=waiting["approval_id"],
            decision="approve",
            comment="from an MCP client",
        )
        ended = False
        while not ended:
            page = await _call(client, "run_events", run_id=run_id, after=after, wait_s=5)
            seen += page["events"]
            after, ended = page["next_after"], page["ended"]
        assert seen[-1]["type"] == "run.ended"
        final = await _call(client, "run_status", run_id=run_id)
        assert final["status"] == "completed" and final["steps_done"] == 3

        refused = await client.call_tool("run_status", {"run_id": "run-" + "0" * 32})
        assert refused.is_error and "404" in str(refused.content)
        bad = await client.call_tool("submit_run", {"goal": "x", "plan": {"steps": []}})
        assert bad.is_error and "422" in str(bad.content)


async def test_mcp_over_http_acts_with_the_key_it_was_sent(
    settings: Settings, worker: Worker, tmp_path: Path
) -> None:
    keys = [
        {"name": "watcher", "sha256": hash_key("key-w"), "roles": ["viewer"]},
        {"name": "sender", "sha256": hash_key("key-s"), "roles": ["submitter"]},
    ]
    with api_process(settings, tmp_path, env={"LONGRUN_API_KEYS": json.dumps(keys)}) as url:
        endpoint = f"{url}/mcp/"
        async with httpx.AsyncClient() as http:
            hello = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
            assert (await http.post(endpoint, json=hello)).status_code == 401
            wrong = {"Authorization": "Bearer not-a-key"}
            assert (await http.post(endpoint, json=hello, headers=wrong)).status_code == 401

        def keyed(key: str) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)

        async with (
            keyed("key-w") as http2,
            Client(streamable_http_client(endpoint, http_client=http2)) as watcher,
        ):
            assert "submit_run" in {t.name for t in (await watcher.list_tools()).tools}
            refused = await watcher.call_tool("submit_run", {"goal": "x", "plan": PLAN})
            assert refused.is_error and "403" in str(refused.content)
        async with (
            keyed("key-s") as http2,
            Client(streamable_http_client(endpoint, http_client=http2)) as sender,
        ):
            created = await _call(sender, "submit_run", goal="mcp over http", plan=PLAN)
            page = await _call(sender, "run_events", run_id=created["run_id"], wait_s=10)
            assert page["events"][0]["id"] == 1 and page["next_after"] >= 1
            status = await _call(sender, "run_status", run_id=created["run_id"])
            assert status["status"] in ("running", "waiting_approval")
            await _call(sender, "cancel_run", run_id=created["run_id"])
