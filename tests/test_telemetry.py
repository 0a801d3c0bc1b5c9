"""Tracing: the start of a run, its workflow and its activities share one trace."""

from __future__ import annotations

import httpx
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.worker import Worker

from tests.helpers import Poll, submit


async def test_a_run_is_one_trace(api: httpx.AsyncClient, worker: Worker, wait_run: Poll) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # the only provider this test process installs

    run_id = await submit(api, [{"id": "a", "tool": "echo"}, {"id": "b", "tool": "echo"}])
    assert (await wait_run(run_id))["status"] == "completed"
    spans = exporter.get_finished_spans()
    names = [s.name for s in spans]
    assert "StartWorkflow:longrun.Run" in names
    assert names.count("RunActivity:tool.echo") == 2
    [start] = [s for s in spans if s.name == "StartWorkflow:longrun.Run"]
    assert start.context is not None
    in_trace = [s.name for s in spans if s.context and s.context.trace_id == start.context.trace_id]
    assert in_trace.count("RunActivity:tool.echo") == 2
