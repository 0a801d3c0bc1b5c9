"""OpenTelemetry tracing: one trace from the API's start of a run through its workflow and
every activity, carried across processes in Temporal headers."""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

from longrun.settings import Settings


def configure_tracing(service: str, settings: Settings) -> None:
    """Install this process's tracer provider; spans go to stderr when LONGRUN_TRACE_CONSOLE
    is set, otherwise to whatever processor a deployment adds to the provider."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if settings.trace_console:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter(out=sys.stderr)))
    trace.set_tracer_provider(provider)
