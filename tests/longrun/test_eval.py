"""The task suite and its scorer: `longrun eval` on a stack of its own (real processes: a
Temporal dev server, workers, the API, the stand-in), its checkers, its scores, and the
proxy its chaos cuts the model server with."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from openai import AsyncOpenAI

from longrun.dev.stack import ServerThread
from longrun.dev.standin import PROFILES, STANDIN_MODEL
from longrun.evals.fixture import Effect, Report
from longrun.evals.plain import Loop
from longrun.evals.proxy import CuttableProxy
from longrun.evals.runner import Attempt, Fault, Outcome, scores
from longrun.evals.tasks import Task, failures, load_tasks, without_effect
from longrun.settings import Settings
from tests.helpers import REPO, StandIn

SUITE = REPO / "evals"


def test_the_suite_has_twenty_tasks_of_both_kinds_and_levels() -> None:
    tasks = load_tasks(SUITE)
    assert len(tasks) >= 20
    assert {t.kind for t in tasks} == {"plan", "goal"}
    assert {t.level for t in tasks} == {"easy", "hard"}
    body = tasks[0].body("eval-m1", "http://fixture")
    assert body["goal"].endswith("(eval-m1)") and body["labels"]["eval"] == tasks[0].name
    # A real model is not shown the stand-in's marker: one called it as a tool.
    shown = [t.body("eval-m1", "http://fixture", marked=False)["goal"] for t in tasks]
    assert not [goal for goal in shown if "eval-m1" in goal]
    timed = {t.name: t.body("m", "u", max_duration_s=60)["budget"] for t in tasks}
    assert timed["goal-hello"] == {"max_duration_s": 60, "on_budget_exhausted": "fail"}
    assert timed["plan-budget"] == {
        "max_model_calls": 2,
        "max_duration_s": 60,
        "on_budget_exhausted": "fail",
    }
    filled = json.dumps([[t.body("m", "u"), t.script("m", "u")] for t in tasks])
    assert "{{fixture}}" not in filled and "{{marker}}" not in filled


def _run(**over: Any) -> dict[str, Any]:
    run: dict[str, Any] = {
        "run_id": "run-1",
        "status": "completed",
        "error": None,
        "steps": [{"id": "a", "output": {"value": "answer: 42"}}],
        "approvals": [{"approval_id": "x"}],
        "pending_approvals": [],
        "budget": {"limits": {"max_model_calls": {"limit": 2, "used": 2}}},
    }
    return {**run, **over}


def test_checkers_find_what_a_run_did_not_do(tmp_path: Path) -> None:
    (tmp_path / "out.txt").write_text("70\n")
    task = Task.model_validate(
        {
            "name": "t",
            "about": "t",
            "level": "easy",
            "run": {"goal": "g"},
            "expect": {
                "status": "completed",
                "files": {"out.txt": {"equals": "70"}, "gone.txt": {"absent": True}},
                "effects": {"order": [{"item": "fig"}]},
                "fetched": ["GET /data/prices"],
                "outputs": {"a": "answer: 42"},
                "approvals": 1,
                "within_budget": True,
            },
        }
    )
    seen = Report(
        requests={},
        by_run={"run-1": {"GET /data/prices": 1}},
        effects=[
            Effect(name="order", body={"item": "fig"}, key="run-1:t1"),
            Effect(name="order", body={"item": "fig"}, key="run-2:t1"),  # another run's
        ],
        absorbed=0,
        applied_twice=0,
    )
    assert failures(task, _run(), seen, tmp_path) == []
    over = _run(status="failed", budget={"limits": {"max_model_calls": {"limit": 2, "used": 3}}})
    empty = Report(requests={}, by_run={}, effects=[], absorbed=0, applied_twice=0)
    (tmp_path / "gone.txt").write_text("here")
    found = failures(task, over, empty, tmp_path)
    assert [f.split(" ")[0] for f in found] == [
        "status",
        "file",
        "effects",
        "never",
        "budget",
    ], found


def test_a_run_completed_without_any_change_asked_for_is_counted(tmp_path: Path) -> None:
    def task(expect: dict[str, Any]) -> Task:
        body = {"name": "t", "about": "t", "level": "easy", "run": {"goal": "g"}}
        return Task.model_validate({**body, "expect": expect})

    writes = task({"files": {"out.txt": {"equals": "70"}, "gone.txt": {"absent": True}}})
    orders = task({"effects": {"order": [{"item": "fig"}]}})
    reads = task({"fetched": ["GET /data/prices"]})
    nothing = Report(requests={}, by_run={}, effects=[], absorbed=0, applied_twice=0)
    assert without_effect(writes, _run(), nothing, tmp_path)
    assert without_effect(orders, _run(), nothing, tmp_path)
    assert not without_effect(reads, _run(), nothing, tmp_path)  # asks for no change
    assert not without_effect(writes, _run(status="failed"), nothing, tmp_path)
    ordered = Report(
        requests={},
        by_run={},
        effects=[Effect(name="order", body={"item": "pear"}, key="run-1:t1")],
        absorbed=0,
        applied_twice=0,
    )
    assert not without_effect(orders, _run(), ordered, tmp_path)  # a change, if not the one
    (tmp_path / "out.txt").write_text("69")
    assert not without_effect(writes, _run(), nothing, tmp_path)
    attempts = [
        Attempt("a", "goal", "easy", 1, "r1", "completed", False, without_effect=True),
        Attempt("a", "goal", "easy", 2, "r2", "completed", True),
    ]
    assert scores(Outcome({}, attempts, [], {}))["completed_without_effect"] == 1


def test_scores_are_pass_at_one_pass_at_k_and_the_rest() -> None:
    attempts = [
        Attempt("a", "plan", "easy", 1, "r1", "completed", True, duration_s=1, cost_usd=0.1),
        Attempt("a", "plan", "easy", 2, "r2", "completed", True, duration_s=2, cost_usd=0.1),
        Attempt("b", "goal", "hard", 1, "r3", "failed", False, duration_s=9, cost_usd=0.2),
        Attempt("b", "goal", "hard", 2, "r4", "completed", True, duration_s=3, cost_usd=0.2),
    ]
    faults = [Fault("worker", 5, 1, 2.0), Fault("model", 9, 20, None)]
    found = scores(Outcome({}, attempts, faults, {"applied_twice": 0}))
    assert (found["pass^1"], found["pass^k"], found["passed"]) == (0.75, 0.5, 3)
    assert found["cost_per_success_usd"] == 0.2
    assert (found["time_p50_s"], found["time_p95_s"]) == (3, 9)
    assert (found["faults"], found["recovery_max_s"], found["runs_not_recovered"]) == (2, 2.0, 1)
    assert found["per_task"] == {"a": "2/2", "b": "1/2"}


async def test_a_cut_proxy_drops_and_refuses_connections_until_it_is_back() -> None:
    app = FastAPI()

    @app.get("/ping")
    async def ping() -> dict[str, bool]:
        return {"ok": True}

    with ServerThread(app) as server:
        port = int(server.url.rsplit(":", 1)[1])
        proxy = CuttableProxy("127.0.0.1", port)
        await proxy.start()
        url = f"http://127.0.0.1:{proxy.port}/ping"
        try:
            async with httpx.AsyncClient(timeout=5) as http:
                assert (await http.get(url)).json() == {"ok": True}
                proxy.set_cut(True)
                try:
                    await http.get(url)
                    raise AssertionError("a cut proxy answered")
                except httpx.TransportError:
                    pass
                proxy.set_cut(False)
                assert (await http.get(url)).json() == {"ok": True}
        finally:
            await proxy.close()


async def test_longrun_eval_scores_tasks_run_through_its_own_stack(tmp_path: Path) -> None:
    picked = ["plan-order-approved", "plan-order-rejected", "goal-order", "plan-budget"]
    argv = [sys.executable, "-m", "longrun.cli", "eval", str(SUITE), "--k", "2"]
    argv += [a for name in picked for a in ("--task", name)] + ["--out", str(tmp_path)]
    done = await asyncio.to_thread(
        subprocess.run, argv, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| standin-k2 |" in done.stdout
    result = json.loads((tmp_path / "standin-k2.json").read_text())
    found = result["scores"]
    assert (found["tasks"], found["attempts"], found["pass^1"], found["pass^k"]) == (4, 8, 1.0, 1.0)
    assert found["applied_twice"] == 0
    # Two approved orders of each kind reached the fixture, once each; rejected ones never.
    assert result["fixture"]["requests"] == {"POST /effects/order": 4}
    statuses = {(a["task"], a["status"]) for a in result["attempts"]}
    assert ("plan-budget", "cancelled") in statuses  # held at its budget, stopped there


async def test_a_plain_loop_runs_beside_longrun_and_is_scored_alike(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "longrun.cli", "eval", str(SUITE), "--k", "1"]
    argv += ["--task", "goal-hello", "--task", "goal-order-rejected", "--baseline", "plain"]
    argv += ["--strategy", "direct", "--out", str(tmp_path)]
    done = await asyncio.to_thread(
        subprocess.run, argv, cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    name = "standin-k1-direct"
    assert f"| longrun, {name} |" in done.stdout and f"| plain loop, {name} |" in done.stdout
    result = json.loads((tmp_path / f"{name}-vs-plain.json").read_text())
    assert result["options"]["strategy"] == "direct"
    for found in (result["scores"], result["baseline_scores"]):
        assert (found["tasks"], found["attempts"], found["pass^1"]) == (2, 2, 1.0), found
        assert found["model_calls"] >= 2
    loop = {a["task"]: a for a in result["baseline"]}
    assert loop["goal-hello"]["run_id"].startswith("plain-") and loop["goal-hello"]["passed"]
    # The loop was asked about the order as longrun was, and the scorer said no to both.
    assert loop["goal-order-rejected"]["status"] == "completed"
    assert "POST /effects/order" not in result["fixture"]["requests"]


async def test_the_plain_loop_talks_to_a_llama_cpp_server_and_reads_calls_written_as_text(
    standin: StandIn, tmp_path: Path
) -> None:
    # llama.cpp's server refuses an assistant turn whose content is null, and small models
    # there write their calls as text: the loop must get past both, as longrun does.
    standin.profile(**{**PROFILES["llama-cpp"].model_dump(), "tool_calls_as_text": True})
    standin.scenario(
        [
            {
                "match": "plain-hello",
                "role": "act",
                "tool_results": 0,
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "hello.txt", "content": "hi"}}
                ],
            },
            {"match": "plain-hello", "role": "act", "tool_results": 1, "reply": "done"},
        ]
    )
    workspace = tmp_path / "workspace"
    run = await _loop_run(standin, "plain-hello", workspace, max_model_calls=5)
    assert (run["status"], run["error"]) == ("completed", None)
    assert (workspace / "hello.txt").read_text() == "hi"
    assert run["usage"]["model_calls"] == 2 and run["usage"]["tool_calls"] == 1
    assert run["budget"]["limits"]["model_calls"] == {"limit": 5, "used": 2}
    second = standin.calls("plain-hello", role="act")[1]["messages"]
    assert second[2]["role"] == "assistant" and second[2]["content"] == ""
    assert second[2]["tool_calls"][0]["function"]["name"] == "write_file"


async def test_the_plain_loop_stops_itself_on_a_repeated_call_and_is_scored_by_what_it_did(
    standin: StandIn, tmp_path: Path
) -> None:
    write = {"name": "write_file", "arguments": {"path": "hello.txt", "content": "hi"}}
    standin.scenario([{"match": "plain-again", "role": "act", "tool_calls": [write]}])
    workspace = tmp_path / "workspace"
    run = await _loop_run(standin, "plain-again", workspace, max_model_calls=10)
    # It knows no failure but a broken server or a budget: it stops, and the file counts.
    assert (run["status"], run["error"]) == ("completed", None)
    assert run["stopped"].startswith("the same call 3 times in a row: write_file")
    assert run["usage"]["model_calls"] == 3 and (workspace / "hello.txt").read_text() == "hi"


async def _loop_run(
    standin: StandIn, marker: str, workspace: Path, max_model_calls: int
) -> dict[str, Any]:
    """The plain loop, on the stand-in, asked to write hi into hello.txt in `workspace`."""
    workspace.mkdir()
    loop = Loop(
        run_id=marker,
        goal=f"{marker}: write hi into hello.txt",
        tools=["write_file"],
        budget={"max_model_calls": max_model_calls},
        decide="approve",
        model=STANDIN_MODEL,
        workspace=workspace,
        settings=Settings(_env_file=None, LONGRUN_DATA_DIR=workspace.parent),  # type: ignore[call-arg]
    )
    async with AsyncOpenAI(base_url=standin.base_url, api_key="x", max_retries=0) as client:
        return await loop.run(client)
