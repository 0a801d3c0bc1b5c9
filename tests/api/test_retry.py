"""Retry of a failed plan run: the new run takes over the steps the old one completed (their
outputs, not run again, not charged again) and runs the rest; calls are counted where they
arrive, at the model stand-in and at a receiver."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from temporalio.client import Client
from temporalio.worker import Worker

from api.app import create_app
from longrun.dev.stack import ServerThread
from longrun.policy import Policy
from longrun.settings import Settings
from tests.helpers import Poll, StandIn, allow, submit
from worker import serving


class Receiver:
    """Counts requests by path; `/gate` answers 503 until opened."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()
        self.open = False
        self.app = FastAPI()

        @self.app.api_route("/{name}", methods=["GET", "POST"])
        async def hit(name: str, request: Request) -> Response:
            self.counts[name] += 1
            if name == "gate" and not self.open:
                return Response("closed", status_code=503)
            return Response('{"ok": true}', media_type="application/json")


@pytest.fixture
def receiver(settings: Settings) -> Iterator[tuple[Receiver, str]]:
    found = Receiver()
    with ServerThread(found.app) as server:
        allow(settings, server.url)
        yield found, server.url


def _plan(url: str) -> list[dict[str, Any]]:
    """Ten steps one after another: model steps and GETs, the seventh of the gate."""
    steps: list[dict[str, Any]] = []
    for n in range(1, 11):
        if n == 7:
            step = {
                "tool": "http_request",
                "args": {"method": "GET", "url": f"{url}/gate"},
                "retry": {"max_attempts": 1},
            }
        elif n % 2:
            step = {"model": {"prompt": f"retry-test step {n}"}}
        else:
            step = {"tool": "http_request", "args": {"method": "GET", "url": f"{url}/s{n}"}}
        steps.append({"id": f"s{n}", **step, **({"depends_on": [f"s{n - 1}"]} if n > 1 else {})})
    return steps


async def test_a_retry_runs_only_the_steps_from_the_one_that_failed(
    api: httpx.AsyncClient,
    worker: Worker,
    standin: StandIn,
    wait_run: Poll,
    receiver: tuple[Receiver, str],
) -> None:
    target, url = receiver
    failed_id = await submit(api, _plan(url))
    failed = await wait_run(failed_id)
    assert failed["status"] == "failed", failed
    assert [s["status"] for s in failed["steps"]] == ["completed"] * 6 + ["failed"] + [
        "cancelled"
    ] * 3
    first_usage = failed["usage"]

    target.open = True
    retried = await api.post(f"/v1/runs/{failed_id}/retry")
    assert retried.status_code == 202, retried.text
    body = retried.json()
    assert body["retry_of"] == failed_id and body["reused"] == [f"s{n}" for n in range(1, 7)]
    run = await wait_run(body["run_id"])
    assert run["status"] == "completed", run
    assert all(s["status"] == "completed" for s in run["steps"])
    # The taken-over steps keep the outputs the first run recorded.
    assert [s["output"] for s in run["steps"][:6]] == [s["output"] for s in failed["steps"][:6]]

    # Steps 1-6 ran once (in the first run), 7 twice (failed, then in the retry), 8-10 once.
    assert target.counts == Counter({"s2": 1, "s4": 1, "s6": 1, "gate": 2, "s8": 1, "s10": 1})
    for n in (1, 3, 5, 9):
        assert len(standin.calls(f"retry-test step {n}")) == 1, n
    # Not charged again: the retry paid for its own model calls only.
    assert (run["usage"]["model_calls"], run["usage"]["tool_calls"]) == (1, 3)  # 9; 7, 8, 10
    assert (first_usage["model_calls"], first_usage["tool_calls"]) == (3, 4)

    trail = (await api.get(f"/v1/runs/{body['run_id']}/audit")).json()["entries"]
    assert any(e["action"] == "retry" and failed_id in (e["detail"] or "") for e in trail)
    # ...and the failed run's own audit names its retry.
    old_trail = (await api.get(f"/v1/runs/{failed_id}/audit")).json()["entries"]
    assert (old_trail[-1]["action"], old_trail[-1]["detail"]) == (
        "retried",
        f"as {body['run_id']}",
    )


async def test_only_failed_or_cancelled_runs_are_retried(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    done = await submit(api, [{"id": "a", "tool": "echo"}])
    await wait_run(done)
    refused = await api.post(f"/v1/runs/{done}/retry")
    assert refused.status_code == 409 and "completed" in refused.json()["detail"]
    goal = (await api.post("/v1/runs", json={"goal": "retry-test: a goal"})).json()["run_id"]
    assert (await api.post(f"/v1/runs/{goal}/cancel", json={})).status_code == 202
    assert (await wait_run(goal))["status"] == "cancelled"
    # A goal-only run cancelled before its agent made a plan: the retry plans again.
    retried = await api.post(f"/v1/runs/{goal}/retry")
    assert retried.status_code == 202 and retried.json()["reused"] == []
    await api.post(f"/v1/runs/{retried.json()['run_id']}/cancel", json={})
    assert (await api.post(f"/v1/runs/run-{'0' * 32}/retry")).status_code == 404
    assert (await api.post("/v1/runs/nope/retry")).status_code == 404


async def test_a_fork_runs_again_from_a_step_with_later_steps_changed(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll, receiver: tuple[Receiver, str]
) -> None:
    target, url = receiver
    target.open = True
    steps = [
        {"id": "a", "tool": "http_request", "args": {"method": "GET", "url": f"{url}/a"}},
        {"id": "b", "tool": "echo", "args": {"value": "b"}, "depends_on": ["a"]},
        {
            "id": "side",
            "tool": "http_request",
            "args": {"method": "GET", "url": f"{url}/side"},
            "depends_on": [],
        },
        {"id": "c", "tool": "http_request", "args": {"method": "GET", "url": f"{url}/c"}},
        {"id": "d", "tool": "echo", "args": {"value": "d"}, "depends_on": ["c"]},
    ]
    steps[3]["depends_on"] = ["b"]
    original = await submit(api, steps)
    assert (await wait_run(original))["status"] == "completed"

    patch = [{"id": "d", "tool": "echo", "args": {"value": "d, changed"}, "depends_on": ["c"]}]
    forked = await api.post(
        f"/v1/runs/{original}/fork", json={"from_step": "b", "plan_patch": patch}
    )
    assert forked.status_code == 202, forked.text
    body = forked.json()
    assert body["retry_of"] == original and sorted(body["reused"]) == ["a", "side"]
    run = await wait_run(body["run_id"])
    assert run["status"] == "completed", run
    outputs = {s["id"]: s["output"] for s in run["steps"]}
    assert outputs["d"] == {"value": "d, changed"} and outputs["b"] == {"value": "b"}
    # a and side ran once (in the original); c, which depends on b, twice.
    assert target.counts == Counter({"a": 1, "side": 1, "c": 2})

    refusals = [
        ({"from_step": "zz"}, "from_step"),
        ({"from_step": "c", "plan_patch": [{"id": "a", "tool": "echo"}]}, "taken over"),
        ({"from_step": "c", "plan_patch": [{"id": "d", "tool": "nope"}]}, "nope"),
        ({"from_step": "c", "plan_patch": [{"id": "d", "tool": "echo"}] * 2}, "twice"),
        ({"from_step": "c", "compensate": 1}, "compensate"),
        ({}, "from_step"),
    ]
    for refused_body, said in refusals:
        refused = await api.post(f"/v1/runs/{original}/fork", json=refused_body)
        assert refused.status_code == 422, (refused_body, refused.text)
        assert said in refused.text, refused.text
    assert target.counts == Counter({"a": 1, "side": 1, "c": 2})  # nothing more ran


async def test_a_fork_compensates_first_and_both_audits_name_it(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    """With `compensate`, the fork first undoes the writes the forked run made in the steps
    that run again (in that run's workspace), then runs them as patched; the forked run's
    audit names the fork, the fork's names what it undid."""
    steps = [
        {"id": "a", "tool": "write_file", "args": {"path": "a.txt", "content": "one"}},
        {
            "id": "b",
            "tool": "write_file",
            "args": {"path": "{{steps.a.output.path}}.b", "content": "two"},
        },
    ]
    original = await submit(api, steps)
    assert (await wait_run(original))["status"] == "completed"
    old = settings.workspaces_dir / original / "workspace"
    assert (old / "a.txt.b").read_text() == "two"

    patch = [{"id": "b", "tool": "write_file", "args": {"path": "b.txt", "content": "three"}}]
    forked = await api.post(
        f"/v1/runs/{original}/fork",
        json={"from_step": "b", "plan_patch": patch, "compensate": True},
    )
    assert forked.status_code == 202, forked.text
    new_id = forked.json()["run_id"]
    run = await wait_run(new_id)
    assert run["status"] == "completed", run["error"]
    assert not (old / "a.txt.b").exists() and (old / "a.txt").read_text() == "one"
    new = settings.workspaces_dir / new_id / "workspace"
    assert (new / "b.txt").read_text() == "three"

    audit = (await api.get(f"/v1/runs/{new_id}/audit")).json()["entries"]
    first = next(e for e in audit if e["action"] == "compensated first")
    assert first["detail"] == f"in {original}: b"
    old_audit = (await api.get(f"/v1/runs/{original}/audit")).json()["entries"]
    assert (old_audit[-1]["action"], old_audit[-1]["detail"]) == ("forked", f"as {new_id}")


async def test_a_goal_only_run_is_retried_and_forked_from_its_agents_plan(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    """A goal-only run cancelled at step two of its agent's plan is retried: the agent
    goes on at step two (step one taken over, not planned or acted again); a fork from step
    two tells the agent the guidance given."""
    goal = "agent-retry: do one, then two"
    plan = {
        "steps": [
            {"id": "one", "intent": "do one", "expected_evidence": "one done"},
            {"id": "two", "intent": "do two", "expected_evidence": "two done"},
        ]
    }
    standin.scenario(
        [
            {"match": "agent-retry", "role": "plan", "json": plan},
            {"match": "agent-retry", "role": "act", "times": 1, "reply": "did one"},
            {
                "match": "agent-retry",
                "role": "act",
                "times": 1,
                "tool_calls": [{"name": "shell", "arguments": {"argv": ["true"]}}],
            },
        ]
    )
    response = await api.post("/v1/runs", json={"goal": goal, "tools": ["shell", "echo"]})
    assert response.status_code == 202, response.text
    old = response.json()["run_id"]
    await wait_run(old, lambda r: bool(r["pending_approvals"]))  # step two's shell call
    assert (await api.post(f"/v1/runs/{old}/cancel")).status_code == 202
    assert (await wait_run(old))["status"] == "cancelled"
    assert len(standin.calls("agent-retry", role="act")) == 2

    standin.scenario([{"match": "agent-retry", "role": "act", "times": 1, "reply": "did two"}])
    retried = await api.post(f"/v1/runs/{old}/retry")
    assert retried.status_code == 202, retried.text
    assert retried.json()["reused"] == ["one"]
    run = await wait_run(retried.json()["run_id"])
    assert run["status"] == "completed", run["error"]
    assert [(i["id"], i["status"], i["summary"]) for i in run["plan"]] == [
        ("one", "completed", "did one"),
        ("two", "completed", "did two"),
    ]
    assert len(standin.calls("agent-retry", role="plan")) == 1  # not planned again
    assert len(standin.calls("agent-retry", role="act")) == 3  # step two only

    standin.scenario([{"match": "agent-retry", "role": "act", "times": 1, "reply": "two, again"}])
    forked = await api.post(
        f"/v1/runs/{old}/fork", json={"from_step": "two", "guidance": "use echo, not shell"}
    )
    assert forked.status_code == 202, forked.text
    run = await wait_run(forked.json()["run_id"])
    assert run["status"] == "completed", run["error"]
    last_act = standin.calls("agent-retry", role="act")[-1]
    assert "use echo, not shell" in str(last_act["messages"])
    refused = await api.post(f"/v1/runs/{old}/fork", json={"from_step": "nine"})
    assert refused.status_code == 422 and "one, two" in refused.text
    patched = await api.post(
        f"/v1/runs/{old}/fork",
        json={"from_step": "two", "plan_patch": [{"id": "x", "tool": "echo"}]},
    )
    assert patched.status_code == 422 and "plan runs" in patched.text


async def test_a_retry_is_checked_against_the_policy_in_force(
    api: httpx.AsyncClient,
    settings: Settings,
    client: Client,
    worker: Worker,
    wait_run: Poll,
    tmp_path: Path,
) -> None:
    steps = [{"id": "a", "tool": "shell", "args": {"argv": ["false"]}, "requires_approval": False}]
    run_id = await submit(api, steps)
    assert (await wait_run(run_id))["status"] == "failed"
    policy = tmp_path / "policy.toml"
    policy.write_text("[tools.shell]\nallowed = false\n")
    strict = settings.model_copy(update={"policy_file": policy})
    transport = httpx.ASGITransport(app=create_app(strict))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as now:
        refused = await now.post(f"/v1/runs/{run_id}/retry")
    assert refused.status_code == 403, refused.text
    assert "policy in force refuses" in refused.text and "step a" in refused.text
    # Under the policy it was started with (still in force here), it is retried, and the
    # new run's audit names the policy it was admitted under.
    retried = await api.post(f"/v1/runs/{run_id}/retry")
    assert retried.status_code == 202
    trail = (await api.get(f"/v1/runs/{retried.json()['run_id']}/audit")).json()["entries"]
    assert trail[1]["action"] == "policy" and Policy().digest() in trail[1]["detail"]

    # A worker enforces the policy in force whatever a run was started with (a schedule's
    # run, a run from before the change): the step is refused and the audit says why.
    queue = settings.model_copy(update={"task_queue": f"strict-{uuid.uuid4().hex[:8]}"})
    transport = httpx.ASGITransport(app=create_app(queue))  # the old, permissive policy
    async with (
        serving(client, queue.model_copy(update={"policy_file": policy})),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as before,
    ):
        late = await submit(before, steps)
        run = await wait_run(late)
    assert run["status"] == "failed"
    assert "the policy in force forbids the tool 'shell'" in run["steps"][0]["error"]
    audit = (await api.get(f"/v1/runs/{late}/audit")).json()["entries"]
    assert "the policy in force forbids the tool 'shell'" in audit[-1]["detail"]
