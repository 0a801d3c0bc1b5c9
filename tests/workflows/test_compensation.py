"""Compensation: a failed, cancelled or rejected run undoes its completed reversible steps
once each, newest first, and lists what it could not undo."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from temporalio.worker import Worker

from activities.errors import transient
from activities.tools.registry import ToolContext, tool
from longrun.contracts import SideEffect
from longrun.dev.stack import ServerThread
from longrun.settings import Settings
from tests.helpers import Poll, submit


class Ledger:
    """A booking service: reservations, and releases that fail once per booking."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.failed_once: set[str] = set()
        app = FastAPI()

        @app.post("/reserve/{name}")
        async def reserve(name: str) -> dict[str, str]:
            self.log.append(f"reserve {name}")
            return {"booking": name}

        @app.post("/release/{name}")
        async def release(name: str) -> JSONResponse:
            if name == "r3" and name not in self.failed_once:
                self.failed_once.add(name)
                self.log.append(f"release {name} failed")
                return JSONResponse({"error": "busy"}, status_code=503)
            self.log.append(f"release {name}")
            return JSONResponse({"released": name})

        self.server = ServerThread(app)


LEDGER = Ledger()


class BookingArgs(BaseModel):
    name: str
    hold_s: float = 0.0  # work after the booking is made, which a cancel interrupts


async def _post(path: str) -> dict[str, Any]:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{LEDGER.server.url}{path}")
    if response.status_code >= 500:
        raise transient(f"{path} answered {response.status_code}")
    data: dict[str, Any] = response.json()
    return data


def _undo_reserve(args: BookingArgs, output: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "unbook", {"name": output["booking"]}


# Adding a reversible tool is one decorated function (and its undo).
@tool("book", args=BookingArgs, side_effect=SideEffect.REVERSIBLE, compensate=_undo_reserve)
async def book(args: BookingArgs, ctx: ToolContext) -> dict[str, Any]:
    """Reserve a booking (test tool)."""
    booking = await _post(f"/reserve/{args.name}")
    # Too late to stop once booked: a cancel during the rest says so, to be undone.
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(args.hold_s)
    return booking


@tool("unbook", args=BookingArgs, side_effect=SideEffect.READ_ONLY)
async def unbook(args: BookingArgs, ctx: ToolContext) -> dict[str, Any]:
    """Release a booking (test tool)."""
    return await _post(f"/release/{args.name}")


@pytest.fixture(scope="module", autouse=True)
def ledger() -> Iterator[Ledger]:
    with LEDGER.server:
        yield LEDGER


def reserve(name: str) -> dict[str, Any]:
    return {"id": name, "tool": "book", "args": {"name": name}}


async def test_failure_at_step_k_undoes_steps_before_it_in_reverse_once_each(
    api: httpx.AsyncClient, worker: Worker, ledger: Ledger, wait_run: Poll
) -> None:
    ledger.log.clear()
    steps = [reserve(f"r{i}") for i in range(1, 5)]
    steps.append({"id": "k", "tool": "read_file", "args": {"path": "missing.txt"}})
    run_id = await submit(api, steps, on_failure="compensate")
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    assert run["result"] == {"compensated": ["r4", "r3", "r2", "r1"], "not_undone": []}
    assert ledger.log == [
        "reserve r1",
        "reserve r2",
        "reserve r3",
        "reserve r4",
        "release r4",
        "release r3 failed",  # retried by Temporal, and applied once
        "release r3",
        "release r2",
        "release r1",
    ]
    audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    assert [e["detail"] for e in audit if e["action"] == "compensated"] == [
        "r4: unbook",
        "r3: unbook",
        "r2: unbook",
        "r1: unbook",
    ]


async def test_cancel_with_compensate_restores_files_and_lists_what_stays_done(
    api: httpx.AsyncClient, worker: Worker, settings: Settings, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "seed", "tool": "write_file", "args": {"path": "b.txt", "content": "old"}},
            {"id": "new", "tool": "write_file", "args": {"path": "a.txt", "content": "a"}},
            {"id": "edit", "tool": "write_file", "args": {"path": "b.txt", "content": "new"}},
            {
                "id": "sh",
                "tool": "shell",
                "args": {"argv": ["true"]},
                "requires_approval": False,
            },
            {"id": "gate", "approval": {"message": "never answered"}},
        ],
    )
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    workspace: Path = settings.workspaces_dir / run_id / "workspace"
    assert (workspace / "b.txt").read_text() == "new"
    response = await api.post(f"/v1/runs/{run_id}/cancel", json={"compensate": True})
    assert response.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "cancelled"
    assert run["result"] == {"compensated": ["edit", "new", "seed"], "not_undone": ["sh"]}
    assert not (workspace / "a.txt").exists()
    assert not (workspace / "b.txt").exists()  # seed created it, so undoing seed removes it


async def test_compensation_waits_for_steps_in_flight_to_stop(
    api: httpx.AsyncClient, worker: Worker, settings: Settings, wait_run: Poll
) -> None:
    # A command that would write after a delay is stopped before compensation runs; a
    # booking made before the cancel reached it is undone with the rest.
    late = {"argv": ["sh", "-c", "sleep 2; echo late > late.txt"]}
    run_id = await submit(
        api,
        [
            {"id": "seed", "tool": "write_file", "args": {"path": "s.txt", "content": "s"}},
            {
                "id": "sh",
                "tool": "shell",
                "args": late,
                "requires_approval": False,
                "depends_on": ["seed"],
            },
            {
                "id": "hold",
                "tool": "book",
                "args": {"name": "held", "hold_s": 30},
                "depends_on": ["seed"],
            },
        ],
    )
    run = await wait_run(
        run_id, lambda r: [s["status"] for s in r["steps"]] == ["completed", "running", "running"]
    )
    while "reserve held" not in LEDGER.log:  # noqa: ASYNC110 (another thread's list)
        await asyncio.sleep(0.05)
    response = await api.post(f"/v1/runs/{run_id}/cancel", json={"compensate": True})
    assert response.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "cancelled"
    assert run["result"] == {"compensated": ["hold", "seed"], "not_undone": []}
    assert "release held" in LEDGER.log
    workspace: Path = settings.workspaces_dir / run_id / "workspace"
    await asyncio.sleep(2.5)
    assert not (workspace / "late.txt").exists()
    assert not (workspace / "s.txt").exists()


async def test_a_rejection_that_says_compensate_undoes_earlier_steps(
    api: httpx.AsyncClient, worker: Worker, settings: Settings, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "draft", "tool": "write_file", "args": {"path": "d.txt", "content": "d"}},
            {"id": "ship", "approval": {"message": "ship?"}, "on_reject": "compensate"},
        ],
    )
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    workspace: Path = settings.workspaces_dir / run_id / "workspace"
    assert (workspace / "d.txt").exists()
    await api.post(f"/v1/runs/{run_id}/approvals/apr-ship", json={"decision": "reject"})
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    assert run["result"]["compensated"] == ["draft"]
    assert not (workspace / "d.txt").exists()
