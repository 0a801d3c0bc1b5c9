"""Task metrics over runs with known outcomes match figures worked out by hand."""

from __future__ import annotations

import asyncio
import signal
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
from tests.helpers import Poll, StandIn, allow, start_worker, stop_processes, submit


class Service:
    """A local HTTP service: `/flaky` fails once, then answers; `/held` keeps its first
    caller waiting (the worker that sent it dies meanwhile), then answers at once."""

    def __init__(self) -> None:
        self.tries: dict[str, int] = {}
        app = FastAPI()

        @app.get("/flaky")
        async def flaky() -> JSONResponse:
            n = self.tries["flaky"] = self.tries.get("flaky", 0) + 1
            return JSONResponse({"n": n}, status_code=503 if n == 1 else 200)

        @app.get("/held")
        async def held() -> dict[str, int]:
            n = self.tries["held"] = self.tries.get("held", 0) + 1
            if n == 1:
                await asyncio.sleep(60)
            return {"n": n}

        self.server = ServerThread(app)


def _eager(rule: dict[str, Any]) -> dict[str, Any]:
    return {"match": "metrics-eager", "role": "act", "times": 1, **rule}


# A goal-only run whose agent says it did the step without doing it (the judge finds no
# evidence), then claims the goal met before it is, and only then does the work.
EAGER = [
    {
        "match": "metrics-eager",
        "role": "plan",
        "json": {"steps": [{"id": "w", "intent": "write x.txt", "expected_evidence": "x.txt"}]},
    },
    {
        "match": "metrics-eager",
        "role": "judge",
        "times": 1,
        "json": {"passed": False, "reason": "nothing shows x.txt was written"},
    },
    _eager({"reply": "wrote x.txt"}),
    _eager({"tool_calls": [{"name": "finish", "arguments": {"summary": "done already"}}]}),
    _eager(
        {"tool_calls": [{"name": "write_file", "arguments": {"path": "x.txt", "content": "x"}}]}
    ),
    _eager({"tool_calls": [{"name": "finish", "arguments": {"summary": "now it is written"}}]}),
]


async def test_metrics_add_up_what_runs_recorded(
    api: httpx.AsyncClient,
    settings: Settings,
    standin: StandIn,
    wait_run: Poll,
    tmp_path: Path,
) -> None:
    tag = uuid.uuid4().hex[:12]
    labels = {"labels": {"metrics": tag}}
    since = datetime.now(UTC).isoformat()
    runs: dict[str, Any] = {}
    service = Service()
    allow(settings, service.server.url)
    first = start_worker(settings, tmp_path)
    second = None
    try:
        with service.server:
            # Recovered after a worker kill: the worker dies during a step, another takes over.
            crashed = await submit(
                api,
                [
                    {
                        "id": "held",
                        "tool": "http_request",
                        "args": {"url": f"{service.server.url}/held"},
                    }
                ],
                **labels,
            )
            for _ in range(600):
                if service.tries.get("held"):
                    break
                await asyncio.sleep(0.05)
            first.send_signal(signal.SIGKILL)
            first.wait()
            second = start_worker(settings, tmp_path)
            runs[crashed] = await wait_run(crashed, timeout_s=120)
            # Completed; failed; a step that failed once and was retried.
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
                        "args": {"url": f"{service.server.url}/flaky"},
                        "retry": {"max_attempts": 3, "initial_interval_s": 0.1},
                    }
                ],
                **labels,
            )
            for run_id in (done, failed, retried):
                runs[run_id] = await wait_run(run_id)
        # Paused on its budget, raised by a person, completed.
        budget = await submit(
            api,
            [{"id": "b1", "tool": "echo"}, {"id": "b2", "tool": "echo", "depends_on": ["b1"]}],
            budget={"max_tool_calls": 1},
            **labels,
        )
        await wait_run(budget, lambda r: r["pause_reason"] == "budget")
        raised = await api.post(f"/v1/runs/{budget}/budget", json={"max_tool_calls": 5})
        assert raised.status_code == 202
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
        approved = await api.post(f"/v1/runs/{gated}/approvals/apr-g", json={"decision": "approve"})
        assert approved.status_code == 202
        await wait_run(gated, lambda r: r["pause_reason"] == "requested")
        assert (await api.post(f"/v1/runs/{gated}/resume", json={})).status_code == 202
        # A goal-only run that claimed the goal met too early, was told so, and finished.
        standin.scenario(EAGER)
        eager = (
            await api.post(
                "/v1/runs",
                json={
                    "goal": "metrics-eager: write x.txt",
                    "acceptance": [
                        {
                            "id": "file",
                            "check": {
                                "tool": "read_file",
                                "args": {"path": "x.txt"},
                                "expect": {"contains": "x"},
                            },
                        }
                    ],
                    "tools": ["write_file"],
                    **labels,
                },
            )
        ).json()["run_id"]
        for run_id in (budget, gated, eager):
            runs[run_id] = await wait_run(run_id)
    finally:
        stop_processes(first, second)

    # What each run recorded, as the hand-computed figures below assume.
    assert {r["status"] for k, r in runs.items() if k != failed} == {"completed"}
    assert runs[failed]["status"] == "failed"
    assert runs[crashed]["figures"]["retried_steps"] == 1  # the worker's loss
    assert runs[retried]["figures"]["retried_steps"] == 1
    assert runs[budget]["figures"] | {} == {
        **runs[budget]["figures"],
        "budget_pauses": 1,
        "budget_changes": 1,
    }
    assert runs[gated]["figures"]["approvals"] == 1 and runs[gated]["figures"]["resumes"] == 1
    eager_figures = runs[eager]["figures"]
    assert eager_figures["premature_completions"] == 1 and eager_figures["replans"] == 0

    metrics = (
        await api.get("/v1/metrics", params={"since": since, "label": f"metrics:{tag}"})
    ).json()
    assert metrics["runs"] == {"completed": 6, "failed": 1, "cancelled": 0, "ended": 7, "live": 0}
    assert metrics["success_rate"] == round(6 / 7, 4)
    # Met a failure: the worker's loss, the retried step and the budget pause; all completed.
    assert metrics["met_failure"] == 3 and metrics["recovery_rate"] == 1.0
    assert metrics["interventions"] == {
        "approvals": 1,
        "guidance": 0,
        "budget_changes": 1,
        "resumes": 1,
    }
    assert metrics["interventions_per_run"] == round(3 / 7, 4)
    durations = sorted(r["usage"]["duration_s"] for r in runs.values())
    assert metrics["duration_s"]["p50"] is not None and metrics["runs_without_figures"] == 0
    assert metrics["duration_s"]["p95"] <= durations[-1] + 1
    # Drift: one premature completion in 7 runs, no replans.
    assert metrics["drift"]["premature_completions_per_run"] == round(1 / 7, 4)
    assert metrics["drift"]["replans_per_run"] == 0.0
    # Its one step verification failed; the claims of completion went to the acceptance checks.
    assert (eager_figures["verifications"], eager_figures["failed_verifications"]) == (1, 1)
    assert metrics["drift"]["failed_verifications_per_verified_step"] == 1.0
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
    assert "longrun_run_duration" in text and "longrun_premature_completions" in text
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

    async def counted(until: Any) -> dict[Any, float]:
        # The counts come from Temporal's visibility, which follows a run's own status a
        # moment later.
        for _ in range(100):
            samples = _samples((await api.get("/metrics")).text)
            if until(samples):
                return samples
            await asyncio.sleep(0.1)
        raise AssertionError(f"the run counts never showed it: {samples}")

    before = _samples((await api.get("/metrics")).text)
    gated = await submit(api, [{"id": "g", "approval": {"message": "ok?"}}])
    await wait_run(gated, lambda r: r["status"] == "waiting_approval")
    waiting = await counted(
        lambda s: runs(s, "waiting_approval") == runs(before, "waiting_approval") + 1
    )
    assert waiting[("longrun_temporal_reachable", ())] == 1
    decided = await api.post(f"/v1/runs/{gated}/approvals/apr-g", json={"decision": "approve"})
    assert decided.status_code == 202
    await wait_run(gated)
    ended = await counted(lambda s: runs(s, "completed") == runs(before, "completed") + 1)
    assert runs(ended, "waiting_approval") == runs(before, "waiting_approval")
    # The API's own requests, by route and status.
    posted = (
        "http_requests_total",
        (("handler", "/v1/runs"), ("method", "POST"), ("status", "2xx")),
    )
    assert ended[posted] >= 1

    # Temporal away: the request metrics still come, the run counts do not.
    dead = settings.model_copy(update={"temporal_address": "127.0.0.1:1"})
    transport = httpx.ASGITransport(app=create_app(dead))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        away = await http.get("/metrics")
    assert away.status_code == 200
    samples = _samples(away.text)
    assert samples[("longrun_temporal_reachable", ())] == 0
    assert not any(name == "longrun_runs" for name, _ in samples)
