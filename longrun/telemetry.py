"""OpenTelemetry tracing: one trace from the API's start of a run through its workflow and
every activity, carried across processes in Temporal headers."""

from __future__ import annotations

import os
import sys

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from longrun.settings import Settings

OTLP_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def configure_tracing(service: str, settings: Settings) -> None:
    """Install this process's tracer provider when its spans have somewhere to go: over
    OTLP (HTTP) when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or ..._TRACES_ENDPOINT) is
    set, to stderr when LONGRUN_TRACE_CONSOLE is. With neither, none is installed: spans
    stay OpenTelemetry's no-ops and Temporal clients carry no tracing (see `exporting`)."""
    exporters: list[SpanExporter] = []
    if any(os.environ.get(name) for name in OTLP_VARIABLES):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporters.append(OTLPSpanExporter())
    if settings.trace_console:
        exporters.append(ConsoleSpanExporter(out=sys.stderr))
    if not exporters:
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for exporter in exporters:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def exporting() -> bool:
    """Whether this process records spans (a tracer provider of OpenTelemetry's SDK is
    installed): only then do Temporal clients carry traces through workflows and
    activities. A span started for nothing costs a worker about a tenth of a tool step's
    CPU (bench/overhead.py's batch)."""
    return isinstance(trace.get_tracer_provider(), TracerProvider)
