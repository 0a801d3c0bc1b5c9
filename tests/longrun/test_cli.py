"""The `longrun` command against a real API: submit, watch, approvals, approve, status,
cancel and tools, with the exit codes scripts rely on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from temporalio.worker import Worker

from longrun.client import (
    EXIT_CANCELLED,
    EXIT_COMPLETED,
    EXIT_FAILED,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_WAITING,
)
from longrun.dev.stack import free_port
from longrun.settings import Settings
from tests.helpers import REPO, api_process


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    with api_process(settings, tmp_path) as url:
        yield url


def longrun(api_url: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LONGRUN_API_URL": api_url, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [sys.executable, "-m", "longrun.cli", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def run_cli(api_url: str, *args: str) -> tuple[int, str, str]:
    proc = longrun(api_url, *args)
    out, err = await asyncio.to_thread(proc.communicate, timeout=120)
    return proc.returncode, out, err


async def test_submit_watch_and_approve_drive_a_run_to_its_end(
    api_url: str, worker: Worker, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    steps = [
        {"id": "draft", "tool": "echo", "args": {"value": "v1"}},
        {"id": "publish", "approval": {"message": "publish the draft?"}, "depends_on": ["draft"]},
        {"id": "done", "tool": "echo", "depends_on": ["publish"]},
    ]
    plan.write_text(json.dumps({"steps": steps}))
    code, out, err = await run_cli(
        api_url, "submit", str(plan), "--goal", "ship it", "--label", "cli:test"
    )
    assert code == EXIT_COMPLETED, err
    run_id = out.strip()
    assert run_id.startswith("run-")

    watcher = longrun(api_url, "watch", run_id, "--json")
    for _ in range(100):
        code, out, _ = await run_cli(api_url, "approvals", "--label", "cli:test", "--json")
        if json.loads(out)["approvals"]:
            break
        await asyncio.sleep(0.2)
    [waiting] = json.loads(out)["approvals"]
    assert (waiting["run_id"], waiting["approval_id"]) == (run_id, "apr-publish")
    code, _, _ = await run_cli(api_url, "status", run_id)
    assert code == EXIT_WAITING

    code, out, err = await run_cli(
        api_url, "approve", run_id, "apr-publish", "--comment", "looks right"
    )
    assert code == EXIT_COMPLETED, err
    assert f"digest {waiting['digest']}" in out  # the call approved, as the run asked it
    watched, _ = await asyncio.to_thread(watcher.communicate, timeout=120)
    assert watcher.returncode == EXIT_COMPLETED
    events = [json.loads(line) for line in watched.splitlines()]
    assert [e["id"] for e in events] == list(range(1, len(events) + 1))
    decided = next(e for e in events if e["type"] == "approval.decided")
    assert decided["data"]["comment"] == "looks right"
    requested = next(e for e in events if e["type"] == "approval.requested")
    assert requested["data"]["digest"] == waiting["digest"]
    assert events[-1]["type"] == "run.ended"

    code, out, _ = await run_cli(api_url, "status", run_id, "--json")
    assert code == EXIT_COMPLETED and json.loads(out)["status"] == "completed"
    # Deciding again is refused, saying who decided first.
    code, _, err = await run_cli(api_url, "reject", run_id, "apr-publish")
    assert code == EXIT_REFUSED and "409" in err


async def test_exit_codes_say_how_a_run_ended_or_why_nothing_happened(
    api_url: str, worker: Worker
) -> None:
    failing = json.dumps(
        {
            "goal": "g",
            "plan": {"steps": [{"id": "x", "tool": "read_file", "args": {"path": "missing"}}]},
        }
    )
    plan = Path(os.environ.get("TMPDIR", "/tmp")) / f"failing-{free_port()}.json"
    plan.write_text(failing)
    code, out, err = await run_cli(api_url, "submit", str(plan), "--watch")
    assert code == EXIT_FAILED, err
    gate = {"id": "g", "approval": {"message": "wait"}}
    plan.write_text(json.dumps({"steps": [gate]}))
    code, out, _ = await run_cli(api_url, "submit", str(plan), "--goal", "wait", "--json")
    run_id = json.loads(out)["run_id"]
    code, out, _ = await run_cli(api_url, "cancel", run_id)
    assert code == EXIT_COMPLETED
    code, _, _ = await run_cli(api_url, "watch", run_id)
    assert code == EXIT_CANCELLED
    code, _, err = await run_cli(api_url, "status", "run-" + "0" * 32)
    assert code == EXIT_REFUSED and "404" in err
    code, _, err = await run_cli(f"http://127.0.0.1:{free_port()}", "list")
    assert code == EXIT_UNREACHABLE and "did not answer" in err
    code, out, _ = await run_cli(api_url, "tools")
    assert code == EXIT_COMPLETED and "write_file" in out
    code, out, _ = await run_cli(api_url, "metrics")
    assert code == EXIT_COMPLETED and "success rate" in out
    plan.unlink()


def test_every_command_says_what_it_does_with_an_example() -> None:
    import typer
    from typer.testing import CliRunner

    from longrun.cli import app

    group = typer.main.get_group(app)
    names = list(group.commands)
    assert {"submit", "status", "watch", "list", "approvals", "approve", "reject"} <= set(names)
    for name in names:
        shown = CliRunner().invoke(app, [name, "--help"])
        assert shown.exit_code == 0, shown.output
        assert "Example:" in shown.output and "longrun " in shown.output, name
