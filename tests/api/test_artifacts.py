"""Big outputs live in the artifact store: history carries references, tools and models
read through them, the API lists, serves and deletes a run's artifacts, and the worker
applies retention."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from api.app import create_app
from longrun import wire
from longrun.artifacts import S3ArtifactStore, store_for
from longrun.settings import ApiKey, Settings, hash_key
from longrun.temporal import DATA_CONVERTER
from tests.helpers import LISTING_WORDS, Poll, StandIn, allow, listing_server, submit
from worker import serving
from workflows import RunWorkflow

BIG = "ab" * 30_000  # 60,000 characters, well above the 8 KB threshold


async def test_big_outputs_leave_history_and_are_read_through(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {
                "id": "big",
                "tool": "python",
                "args": {"code": "print('ab' * 30000, end='')"},
                "requires_approval": False,
            },
            {
                "id": "save",
                "tool": "write_file",
                "args": {"path": "out/report.txt", "content": "{{steps.big.output.stdout}}"},
            },
            {"id": "ask", "model": {"prompt": "artifact-prompt: {{steps.big.output.stdout}}"}},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    ref = run["steps"][0]["output"]["stdout"]
    assert set(ref) == {"artifact", "bytes", "preview"}
    assert ref["bytes"] == len(BIG) and ref["preview"] == BIG[:200]
    # The model got the content, not the reference.
    [call] = standin.calls("artifact-prompt")
    assert call["messages"][-1]["content"] == f"artifact-prompt: {BIG}"
    # History holds references only.
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert len(history.to_json()) < 40_000
    assert BIG not in history.to_json()

    listed = (await api.get(f"/v1/runs/{run_id}/artifacts")).json()["artifacts"]
    assert {"name": ref["artifact"], "bytes": len(BIG), "kind": "output"} in listed
    assert {"name": "out/report.txt", "bytes": len(BIG), "kind": "deliverable"} in listed
    stored = await api.get(f"/v1/runs/{run_id}/artifacts/{ref['artifact']}")
    assert stored.text == BIG and stored.headers["content-type"].startswith("text/plain")
    report = await api.get(f"/v1/runs/{run_id}/artifacts/out/report.txt")
    assert report.text == BIG and report.headers["content-type"].startswith("text/plain")
    for bad in ("out/../../../etc/passwd", "sha256:" + "0" * 64, "notes.txt", "out/missing"):
        assert (await api.get(f"/v1/runs/{run_id}/artifacts/{bad}")).status_code == 404, bad
    other = "run-" + "0" * 32
    assert (await api.get(f"/v1/runs/{other}/artifacts")).status_code == 404


async def test_call_arguments_too_big_to_travel_are_stored_and_read_back(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # Five outputs of ~56 KB of short strings each travel whole; a step that writes them
    # all into one argument or prompt would send ~280 KB.
    words = [f"word-{i:05d}-of-a-long-list" for i in range(2000)]
    steps: list[dict[str, Any]] = [
        {"id": f"w{n}", "tool": "echo", "args": {"value": words}} for n in range(5)
    ]
    every = "".join(f"{{{{steps.w{n}.output.value}}}}" for n in range(5))
    steps.append(
        {"id": "save", "tool": "write_file", "args": {"path": "out/all.txt", "content": every}}
    )
    steps.append({"id": "ask", "model": {"prompt": f"big-prompt: {every}"}})
    run_id = await submit(api, steps)
    run = await wait_run(run_id, timeout_s=120)
    assert run["status"] == "completed", run["error"]
    expected = json.dumps(words) * 5
    saved = await api.get(f"/v1/runs/{run_id}/artifacts/out/all.txt")
    assert saved.text == expected
    [call] = standin.calls("big-prompt")
    assert call["messages"][-1]["content"] == f"big-prompt: {expected}"
    # Neither call carried it whole.
    history = await client.get_workflow_handle(run_id).fetch_history()
    scheduled = [
        e.activity_task_scheduled_event_attributes
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
    ]
    sizes = {a.activity_type.name: sum(len(p.data) for p in a.input.payloads) for a in scheduled}
    assert sizes["tool.write_file"] < 64 * 1024 and sizes["model.complete"] < 64 * 1024, sizes
    replayed = await Replayer(
        workflows=[RunWorkflow], data_converter=DATA_CONVERTER
    ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure


async def test_a_result_too_big_to_travel_lists_references(
    api: httpx.AsyncClient, client: Client, settings: Settings, worker: Worker, wait_run: Poll
) -> None:
    # Forty parallel GETs, each answering ~60 KB of JSON made of short strings: no string
    # is big enough to be stored on its own, but together the result is ~2.4 MB, above
    # Temporal's payload limit.
    words = LISTING_WORDS
    with listing_server() as url:
        allow(settings, url)
        steps = [
            {"id": f"get{n}", "tool": "http_request", "args": {"url": f"{url}/listing/{n}"}}
            for n in range(40)
        ]
        run_id = await submit(api, [{**s, "depends_on": []} for s in steps])
        run = await wait_run(run_id, timeout_s=120)
    assert run["status"] == "completed", run["error"]
    assert len(run["result"]) == 40
    # The workflow's result is under the bound: the biggest outputs went to the store,
    # the rest travel whole, and every reference reads back whole.
    outputs = (await client.get_workflow_handle(run_id).result())["outputs"]
    assert len(json.dumps(outputs)) <= 512 * 1024
    kept = {n: out for n, out in outputs.items() if "artifact" in out}
    whole = {n: out for n, out in outputs.items() if n not in kept}
    assert kept and whole
    assert all(out["json"]["words"] == words for out in whole.values())
    # The bounded-result patch replays (the history is too big to keep among the saved).
    history = await client.get_workflow_handle(run_id).fetch_history()
    replayed = await Replayer(
        workflows=[RunWorkflow], data_converter=DATA_CONVERTER
    ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None, replayed.replay_failure
    for name, ref in kept.items():
        stored = await api.get(f"/v1/runs/{run_id}/artifacts/{ref['artifact']}")
        assert json.loads(stored.text)["json"] == {"n": int(name[3:]), "words": words}


async def test_an_agent_reads_big_tool_results_through_their_references(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    page = "".join(f"line {i}\n" for i in range(2000))  # ~17 KB
    standin.scenario(
        [
            {
                "match": "artifact-agent",
                "role": "plan",
                "json": {"steps": [{"id": "r", "intent": "read", "expected_evidence": "e"}]},
            },
            {
                "match": "artifact-agent",
                "role": "act",
                "times": 1,
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "big.txt", "content": page}},
                    {"name": "read_file", "arguments": {"path": "big.txt"}},
                ],
            },
            {"match": "artifact-agent", "role": "act", "times": 1, "reply": "read it"},
        ]
    )
    response = await api.post(
        "/v1/runs",
        json={"goal": "artifact-agent: read big.txt", "tools": ["read_file", "write_file"]},
    )
    run_id = response.json()["run_id"]
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert "artifact" in run["steps"][1]["output"]["content"]  # stored, not in history
    seen = standin.calls("artifact-agent", role="act")[1]["messages"][-1]["content"]
    assert "line 1500" in seen  # far past any preview
    assert "[cut:" in seen and len(seen) < 16_100


BIG_STEP = {
    "id": "big",
    "tool": "python",
    "args": {"code": "print('ab' * 30000, end='')"},
    "requires_approval": False,
}


async def test_an_s3_store_holds_big_outputs(
    client: Client, s3_settings: Settings, wait_run: Poll
) -> None:
    transport = httpx.ASGITransport(app=create_app(s3_settings))
    async with (
        serving(client, s3_settings),
        httpx.AsyncClient(transport=transport, base_url="http://localhost") as http,
    ):
        run_id = await submit(
            http,
            [
                BIG_STEP,
                {
                    "id": "echo",
                    "tool": "echo",
                    "args": {
                        "value": {
                            "whole": "{{steps.big.output.stdout}}",
                            "inside": "got {{steps.big.output.stdout}}",
                        }
                    },
                },
            ],
        )
        run = await wait_run(run_id, http=http)
        assert run["status"] == "completed", run
        ref = run["steps"][0]["output"]["stdout"]
        echoed = run["steps"][1]["output"]["value"]
        # The second step read the first one's output back through the bucket, and stored
        # what it returned there again: the same bytes under the same id.
        assert echoed["whole"] == ref
        store = store_for(s3_settings)
        assert isinstance(store, S3ArtifactStore)
        assert store.get(run_id, echoed["inside"]["artifact"]).decode() == f"got {BIG}"
        # Its outputs, and the record it stored as it ended (workflows/final_record.py).
        kept = dict(store.list(run_id))
        desc = await client.get_workflow_handle(run_id).describe()
        assert kept.pop(await desc.memo_value(wire.FINAL_RECORD_MEMO)) > 0
        assert sorted(kept.items()) == sorted(
            [(ref["artifact"], len(BIG)), (echoed["inside"]["artifact"], len(BIG) + 4)]
        )
        served = await http.get(f"/v1/runs/{run_id}/artifacts/{ref['artifact']}")
        assert served.status_code == 200 and served.text == BIG
        listed = (await http.get(f"/v1/runs/{run_id}/artifacts")).json()["artifacts"]
        assert {"name": ref["artifact"], "bytes": len(BIG), "kind": "output"} in listed
    assert not s3_settings.artifacts_dir.exists()  # nothing went to the local disk


def bearer(name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer key-of-{name}"}


@pytest.fixture
async def keyed(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The API with a key per role."""
    roles = {"viewer": "viewer", "sub": "submitter", "approver": "approver", "admin": "admin"}
    keys = [ApiKey(name=n, sha256=hash_key(f"key-of-{n}"), roles=[r]) for n, r in roles.items()]
    transport = httpx.ASGITransport(app=create_app(settings.model_copy(update={"api_keys": keys})))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        yield http


async def test_admins_delete_the_stored_outputs_of_ended_runs(
    keyed: httpx.AsyncClient, settings: Settings, worker: Worker, wait_run: Poll
) -> None:
    admin = bearer("admin")
    response = await keyed.post(
        "/v1/runs",
        json={
            "goal": "test",
            "plan": {"steps": [BIG_STEP, {"id": "gate", "approval": {"message": "ok?"}}]},
        },
        headers=admin,
    )
    assert response.status_code == 202, response.text
    run_id = response.json()["run_id"]
    run = await wait_run(
        run_id, lambda r: r["status"] == "waiting_approval", http=keyed, headers=admin
    )
    produced = run["steps"][0]["output"]["stdout"]["artifact"]
    store = store_for(settings)
    other_run = "run-" + uuid.uuid4().hex
    kept = store.put(other_run, b"another run's output")
    out = settings.workspaces_dir / run_id / "workspace" / "out"
    out.mkdir(parents=True)
    (out / "report.txt").write_text("deliverable")

    url = f"/v1/runs/{run_id}/artifacts"
    for who in ("viewer", "sub", "approver"):
        assert (await keyed.delete(url, headers=bearer(who))).status_code == 403, who
    assert (await keyed.delete(url)).status_code == 401
    still_open = await keyed.delete(url, headers=admin)
    assert still_open.status_code == 409 and "still open" in still_open.json()["detail"]
    unknown = f"/v1/runs/run-{uuid.uuid4().hex}/artifacts"
    assert (await keyed.delete(unknown, headers=admin)).status_code == 404
    assert (await keyed.delete("/v1/runs/..%2Fx/artifacts", headers=admin)).status_code == 404
    assert store.list(run_id) == [(produced, len(BIG))]

    assert (await keyed.post(f"/v1/runs/{run_id}/cancel", headers=admin)).status_code == 202
    await wait_run(run_id, http=keyed, headers=admin)
    response = await keyed.delete(url, headers=admin)
    assert response.status_code == 200, response.text
    assert response.json() == {"deleted": 2}  # its output and its final record
    assert store.list(run_id) == []
    assert store.get(other_run, kept) == b"another run's output"
    listed = (await keyed.get(url, headers=admin)).json()["artifacts"]
    assert listed == [{"name": "out/report.txt", "bytes": 11, "kind": "deliverable"}]
    assert (await keyed.delete(url, headers=admin)).json() == {"deleted": 0}


async def test_the_worker_prunes_old_artifacts_of_ended_runs(
    api: httpx.AsyncClient, client: Client, settings: Settings
) -> None:
    # Started with no worker polling yet: the run is open and stays so.
    open_run = await submit(api, [{"id": "gate", "approval": {"message": "ok?"}}])
    # Ended just now, after its artifacts were last written ten days ago.
    just_ended = await submit(api, [{"id": "gate", "approval": {"message": "ok?"}}])
    await client.get_workflow_handle(just_ended).terminate("ended just now")
    # Unknown to Temporal: ended longer ago than it keeps histories.
    ended_run, fresh_run = f"run-{uuid.uuid4().hex}", f"run-{uuid.uuid4().hex}"
    store = store_for(settings)
    ten_days_ago = time.time() - 10 * 86_400
    for run_id in (open_run, just_ended, ended_run, fresh_run):
        artifact = store.put(run_id, run_id.encode())
        if run_id != fresh_run:
            path = settings.artifacts_dir / run_id / artifact.removeprefix("sha256:")
            os.utime(path, (ten_days_ago, ten_days_ago))
    retained = settings.model_copy(update={"artifact_retention_days": 7.0})
    try:
        async with serving(client, retained):
            for _ in range(300):
                if not store.list(ended_run):
                    break
                await asyncio.sleep(0.1)
            assert store.list(ended_run) == []
            assert len(store.list(open_run)) == 1  # open runs are spared, however old
            assert len(store.list(just_ended)) == 1  # retention counts from the run's end
            assert len(store.list(fresh_run)) == 1
    finally:
        await client.get_workflow_handle(open_run).terminate("test over")


async def test_a_failing_sweep_is_logged_and_the_worker_goes_on(
    client: Client, s3_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    broken = s3_settings.model_copy(
        update={"s3_bucket": "no-such-bucket", "artifact_retention_days": 1.0}
    )
    with caplog.at_level(logging.ERROR, logger="longrun.worker"):
        async with serving(client, broken) as worker:
            for _ in range(300):
                if "artifact retention sweep failed" in caplog.text:
                    break
                await asyncio.sleep(0.1)
            assert "artifact retention sweep failed" in caplog.text
            assert "NoSuchBucket" in caplog.text
            assert worker.is_running
