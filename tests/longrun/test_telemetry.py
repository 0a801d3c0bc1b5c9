"""Tracing: the request that starts a run, its workflow and every activity share one
trace; model calls carry OpenTelemetry's GenAI attributes."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import httpx
from fastapi import FastAPI, Request, Response
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from longrun.dev.stack import ServerThread, free_port
from longrun.settings import Settings
from longrun.telemetry import OTLP_VARIABLES, exporting
from longrun.temporal import connect
from tests.helpers import Poll, StandIn, api_app, start_api, stop_processes, submit
from worker import serving


async def test_a_run_is_one_trace_from_its_request(
    settings: Settings, standin: StandIn, wait_run: Poll
) -> None:
    exporter = InMemorySpanExporter()
    # A process has one tracer provider: an API another test started here may have
    # installed it (longrun.telemetry), and then this test listens to that one.
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # Clients connected from now on carry traces, as those of an API or worker whose spans
    # are exported: this test's own, for the API and the worker.
    assert exporting()
    steps = [
        {"id": "a", "tool": "echo"},
        {"id": "b", "tool": "echo"},
        {"id": "ask", "model": {"prompt": "traced prompt"}},
    ]
    client = await connect(settings)
    async with serving(client, settings), api_app(settings) as api:
        run_id = await submit(api, steps)
        assert (await wait_run(run_id, http=api))["status"] == "completed"
    spans = exporter.get_finished_spans()
    [request] = [s for s in spans if s.name == "POST /v1/runs"]
    assert request.context is not None
    in_trace = [s for s in spans if s.context and s.context.trace_id == request.context.trace_id]
    names = [s.name for s in in_trace]
    assert "StartWorkflow:longrun.Run" in names and "RunWorkflow:longrun.Run" in names
    assert names.count("RunActivity:tool.echo") == 2
    assert names.count("RunActivity:model.complete") == 1
    [chat] = [s for s in in_trace if s.name == "chat test-model"]
    attributes = dict(chat.attributes or {})
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.request.model"] == "test-model"
    assert attributes["gen_ai.usage.input_tokens"] > 0
    assert attributes["gen_ai.usage.output_tokens"] > 0


async def test_spans_go_over_otlp_when_the_standard_endpoint_is_set(
    settings: Settings, tmp_path: Path
) -> None:
    received: list[bytes] = []
    app = FastAPI()

    @app.post("/v1/traces")
    async def traces(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=200)

    with ServerThread(app) as collector:
        port = free_port()
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
        proc = start_api(settings, tmp_path, port, env=env)
        try:
            async with httpx.AsyncClient() as http:
                await http.get(f"http://127.0.0.1:{port}/v1/tools")
                for _ in range(100):
                    if "GET /v1/tools" in _span_names(received):
                        break
                    await asyncio.sleep(0.1)
        finally:
            stop_processes(proc)
    assert "GET /v1/tools" in _span_names(received)


def _span_names(exports: list[bytes]) -> list[str]:
    names = []
    for body in exports:
        request = ExportTraceServiceRequest.FromString(body)
        names += [s.name for r in request.resource_spans for ss in r.scope_spans for s in ss.spans]
    return names


def test_without_an_exporter_nothing_is_traced(tmp_path: Path) -> None:
    # In a process of its own: this one's tracer provider may be installed already.
    check = (
        "from longrun.settings import Settings\n"
        "from longrun.telemetry import configure_tracing, exporting\n"
        "configure_tracing('longrun-worker', Settings(_env_file=None))\n"
        "print(exporting())\n"
    )
    quiet = {k: v for k, v in os.environ.items() if k not in OTLP_VARIABLES}
    quiet.pop("LONGRUN_TRACE_CONSOLE", None)
    for env, expected in (
        (quiet, "False"),
        ({**quiet, "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, "True"),
        ({**quiet, "LONGRUN_TRACE_CONSOLE": "true"}, "True"),
    ):
        answer = subprocess.run(
            [sys.executable, "-c", check], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert answer.stdout.strip() == expected, answer.stderr
