"""Connecting to Temporal the same way everywhere: API, worker, CLI, tests."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import sys
from typing import NoReturn

from opentelemetry import trace
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.failure.v1 import Failure
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionRequest
from temporalio.client import Client, WorkflowExecutionDescription
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DefaultFailureConverter, PayloadConverter
from temporalio.envconfig import ClientConfig
from temporalio.exceptions import ApplicationError
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.service import RPCError, RPCStatusCode

from longrun.attributes import SEARCH_ATTRIBUTES
from longrun.settings import Settings
from longrun.telemetry import exporting


class ShortFailureConverter(DefaultFailureConverter):
    """Failures as a person reads them in history and the Web UI: longrun's own errors
    (ApplicationError) carry their message and type, not the frames that raised them; other
    exceptions (bugs) keep their traceback, also as the cause of an error that wraps them."""

    def to_failure(
        self, exception: BaseException, payload_converter: PayloadConverter, failure: Failure
    ) -> None:
        """See the base class; drops the stack trace of an ApplicationError."""
        super().to_failure(exception, payload_converter, failure)
        if isinstance(exception, ApplicationError):
            failure.stack_trace = ""


# The pydantic payload converter (runs pass pydantic models) with short failures.
DATA_CONVERTER = dataclasses.replace(
    pydantic_data_converter, failure_converter_class=ShortFailureConverter
)


MAX_CONNECT_DELAY_S = 30.0


async def connect(settings: Settings, runtime: Runtime | None = None) -> Client:
    """A client for the configured server and namespace, with the pydantic converter.

    TLS, mTLS and API-key authentication come from Temporal's own client configuration:
    `TEMPORAL_TLS`, `TEMPORAL_TLS_CA`, `TEMPORAL_TLS_CERT`, `TEMPORAL_TLS_KEY`,
    `TEMPORAL_TLS_SERVER_NAME`, `TEMPORAL_API_KEY`, or a profile of the configuration file
    (`TEMPORAL_CONFIG_FILE`, `TEMPORAL_PROFILE`), as the `temporal` CLI reads them.
    A worker passes its own `runtime` to export metrics.
    """
    config = ClientConfig.load_client_connect_config()
    config["target_host"] = settings.temporal_address
    config["namespace"] = settings.temporal_namespace
    return await Client.connect(
        **config,
        data_converter=DATA_CONVERTER,
        # Client interceptors apply to workers built on this client too; they trace only
        # where spans go somewhere.
        interceptors=[TracingInterceptor()] if exporting() else [],
        runtime=runtime,
    )


def metrics_runtime(settings: Settings) -> Runtime | None:
    """A Temporal runtime that serves Prometheus metrics at LONGRUN_METRICS_ADDRESS (the
    SDK's worker metrics and longrun's own, which workflows record), or None."""
    if settings.metrics_address is None:
        return None
    prometheus = PrometheusConfig(bind_address=settings.metrics_address)
    return Runtime(telemetry=TelemetryConfig(metrics=prometheus))


async def connect_patiently(
    settings: Settings, log: logging.Logger, runtime: Runtime | None = None
) -> Client:
    """Connect, waiting for a Temporal that is not up yet (starting, restarting, or in
    maintenance): each failed try is logged, the next one comes after a longer pause."""
    delay = 1.0
    while True:
        try:
            return await connect(settings, runtime)
        except RuntimeError as exc:  # the SDK's "Failed client connect"
            log.warning(
                "Temporal at %s is not reachable (%s); trying again in %g s",
                settings.temporal_address,
                str(exc).splitlines()[0],
                delay,
            )
        await asyncio.sleep(delay)
        delay = min(delay * 2, MAX_CONNECT_DELAY_S)


async def ensure_search_attributes(client: Client) -> None:
    """Register longrun's search attributes on the namespace if they are missing."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    missing = {k: v for k, v in SEARCH_ATTRIBUTES.items() if k not in listed.custom_attributes}
    if missing:
        try:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(namespace=client.namespace, search_attributes=missing)
            )
        except RPCError as exc:
            # Another worker replica registered them first.
            if exc.status != RPCStatusCode.ALREADY_EXISTS:
                raise


async def latest_execution(client: Client, workflow_id: str) -> str | None:
    """The Temporal run id of the workflow's latest execution, None if Temporal does not
    know it: the `describe` call, without turning its memo, search attributes and the rest
    into Python (which costs about as much CPU again as the call)."""
    try:
        raw = await client.workflow_service.describe_workflow_execution(
            DescribeWorkflowExecutionRequest(
                namespace=client.namespace,
                execution=WorkflowExecution(workflow_id=workflow_id),
            )
        )
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return raw.workflow_execution_info.execution.run_id


async def described(client: Client, workflow_id: str) -> WorkflowExecutionDescription | None:
    """The workflow's latest execution as Temporal describes it; None if Temporal does not
    know it (never started, or gone past the namespace's retention)."""
    try:
        return await client.get_workflow_handle(workflow_id).describe()
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise


def exit_without_teardown(code: int) -> NoReturn:
    """Exit a process that used a Temporal client or worker. The SDK's Rust threads can
    crash the interpreter's teardown ("PyGILState_Release ... finalizing", or a segfault:
    temporalio/sdk-python#300), so what must not be lost is flushed (spans, logs, output)
    and the teardown skipped."""
    shutdown = getattr(trace.get_tracer_provider(), "shutdown", None)
    if callable(shutdown):
        shutdown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
