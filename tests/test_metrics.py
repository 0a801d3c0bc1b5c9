"""Task metrics over runs with known outcomes match figures worked out by hand."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from prometheus_client.parser import text_string_to_metric_families
from temporalio.worker import Worker

from api.app import create_app
from longrun.dev.stack import ServerThread, free_port
from longrun.settings import Settings
from tests.helpers import Poll, start_worker, stop_processes, submit


async def test_metrics_add_up_what_runs_recorded(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    tag = uuid.uuid4().hex[:12]
    labels = {"labels": {"metrics": tag}}
    since = datetime.now(UTC).isoformat()
    tries: dict[str, int] = {}
    app = FastAPI()

    @app.get("/flaky")
    async def flaky() -> JSONResponse:  # fails once, then answers
        tries["n"] = tries.get("n", 0) + 1
        return JSONResponse({"n": tries["n"]}, status_code=503 if tries["n"] == 1 else 200)

    with ServerThread(app) as server:
        done = await submit(api, [{"id": "a", "tool": "echo"}], **labels)
        failed = await submit(
            api, [{"id": "x", "tool": "read_file", "args": {"path": "nope"}}], **labels
        )
        retried = await submit(
            api,
            [
                {
                    "id": "get",
                    "tool": "http_request",
                    "args": {"url": f"{server.url}/flaky"},
                    "retry": {"max_attempts": 3, "initial_interval_s": 0.1},
                }
            ],
            **labels,
        )
        for run_id in (done, failed, retried):
            await wait_run(run_id)
    # Paused on its budget, raised by a person, completed.
    budget = await submit(
        api,
        [{"id": "b1", "tool": "echo"}, {"id": "b2", "tool": "echo", "depends_on": ["b1"]}],
        budget={"max_tool_calls": 1},
        **labels,
    )
    await wait_run(budget, lambda r: r["pause_reason"] == "budget")
    assert (
        await api.post(f"/v1/runs/{budget}/budget", json={"max_tool_calls": 5})
    ).status_code == 202
    # Approved by a person; paused and resumed by one.
    gated = await submit(
        api,
        [
            {"id": "g", "approval": {"message": "ok?"}},
            {"id": "e", "tool": "echo", "depends_on": ["g"]},
        ],
        **labels,
    )
    await wait_run(gated, lambda r: r["status"] == "waiting_approval")
    assert (await api.post(f"/v1/runs/{gated}/pause", json={})).status_code == 202
    assert (
        await api.post(f"/v1/runs/{gated}/approvals/apr-g", json={"decision": "approve"})
    ).status_code == 202
    await wait_run(gated, lambda r: r["pause_reason"] == "requested")
    assert (await api.post(f"/v1/runs/{gated}/resume", json={})).status_code == 202
    runs: dict[str, Any] = {}
    for run_id in (done, failed, retried, budget, gated):
        runs[run_id] = await wait_run(run_id)
    assert runs[retried]["figures"]["retried_steps"] == 1
    assert runs[budget]["figures"] | {} == {
        **runs[budget]["figures"],
        "budget_pauses": 1,
        "budget_changes": 1,
    }
    assert runs[gated]["figures"]["approvals"] == 1 and runs[gated]["figures"]["resumes"] == 1

    metrics = (
        await api.get("/v1/metrics", params={"since": since, "label": f"metrics:{tag}"})
    ).json()
    assert metrics["runs"] == {"completed": 4, "failed": 1, "cancelled": 0, "ended": 5, "live": 0}
    assert metrics["success_rate"] == 0.8
    # Met a failure: the retried step and the budget pause; both still completed.
    assert metrics["met_failure"] == 2 and metrics["recovery_rate"] == 1.0
    assert metrics["interventions"] == {
        "approvals": 1,
        "guidance": 0,
        "budget_changes": 1,
        "resumes": 1,
    }
    assert metrics["interventions_per_run"] == 0.6  # 3 over 5 runs
    durations = sorted(r["usage"]["duration_s"] for r in runs.values())
    assert metrics["duration_s"]["p50"] is not None and metrics["runs_without_figures"] == 0
    assert metrics["duration_s"]["p95"] <= durations[-1] + 1
    assert metrics["drift"]["replans_per_run"] == 0.0
    # An empty window, and a window the wrong way round.
    empty = (await api.get("/v1/metrics", params={"label": "metrics:nobody"})).json()
    assert empty["runs"]["ended"] == 0 and empty["success_rate"] is None
    backwards = await api.get(
        "/v1/metrics", params={"since": "2030-01-01T00:00:00Z", "until": "2020-01-01T00:00:00Z"}
    )
    assert backwards.status_code == 422


async def test_a_worker_serves_prometheus_metrics_with_longruns_own(
    api: httpx.AsyncClient, settings: Settings, tmp_path: Path, wait_run: Poll
) -> None:
    port = free_port()
    worker = start_worker(settings, tmp_path, env={"LONGRUN_METRICS_ADDRESS": f"127.0.0.1:{port}"})
    try:
        run_id = await submit(api, [{"id": "a", "tool": "echo"}])
        await wait_run(run_id)
        text = ""
        async with httpx.AsyncClient() as scrape:
            for _ in range(50):  # the exporter serves what the meter recorded
                text = (await scrape.get(f"http://127.0.0.1:{port}/metrics")).text
                if "longrun_runs_ended" in text:
                    break
                await asyncio.sleep(0.1)
    finally:
        stop_processes(worker)
    ended = [line for line in text.splitlines() if line.startswith("longrun_runs_ended")]
    assert ended and 'outcome="completed"' in ended[0] and ended[0].endswith(" 1"), text[:2000]
    assert "longrun_run_duration" in text
    assert "temporal_workflow_completed" in text  # the SDK's own worker metrics


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Prometheus text as {(sample name, sorted labels): value}."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_the_api_serves_prometheus_metrics_of_runs_and_requests(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll, settings: Settings
) -> None:
    def runs(samples: dict[Any, float], status: str) -> float:
        return samples[("longrun_runs", (("status", status),))]

    before = _samples((await api.get("/metrics")).text)
    gated = await submit(api, [{"id": "g", "approval": {"message": "ok?"}}])
    await wait_run(gated, lambda r: r["status"] == "waiting_approval")
    waiting = _samples((await api.get("/metrics")).text)
    assert runs(waiting, "waiting_approval") == runs(before, "waiting_approval") + 1
    assert waiting[("longrun_temporal_reachable", ())] == 1
    decided = await api.post(f"/v1/runs/{gated}/approvals/apr-g", json={"decision": "approve"})
    assert decided.status_code == 202
    await wait_run(gated)
    ended = _samples((await api.get("/metrics")).text)
    assert runs(ended, "waiting_approval") == runs(before, "waiting_approval")
    assert runs(ended, "completed") == runs(before, "completed") + 1
    # The API's own requests, by route and status.
    posted = (
        "http_requests_total",
        (("handler", "/v1/runs"), ("method", "POST"), ("status", "2xx")),
    )
    assert ended[posted] >= 1

    # Temporal away: the request metrics still come, the run counts do not.
    dead = settings.model_copy(update={"temporal_address": "127.0.0.1:1"})
    transport = httpx.ASGITransport(app=create_app(dead))
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
        away = await http.get("/metrics")
    assert away.status_code == 200
    samples = _samples(away.text)
    assert samples[("longrun_temporal_reachable", ())] == 0
    assert not any(name == "longrun_runs" for name, _ in samples)
