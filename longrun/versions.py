"""Worker versions. A worker runs as one version (a build id) of a Temporal Worker Deployment;
a run is pinned to the version it started on, so code it never ran never replays its history,
and moves to the deployment's current version when it continues as new
(workflows/handover.py). New runs, schedules' runs and retries start on the current version;
a child run starts on its parent's."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import importlib.util
import logging
import socket
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

from temporalio.api.deployment.v1 import WorkerDeploymentInfo
from temporalio.api.enums.v1 import (
    RoutingConfigUpdateState,
    TaskQueueType,
    WorkerDeploymentVersionStatus,
)
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import (
    DescribeTaskQueueRequest,
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey, VersioningBehavior, WorkerDeploymentVersion
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import WorkerDeploymentConfig

from longrun import wire
from longrun.settings import Settings

log = logging.getLogger("longrun.versions")

# Temporal's own search attribute: "deployment:build id" of the version a run is on.
VERSION_ATTRIBUTE = "TemporalWorkerDeploymentVersion"
VERSION_KEY = SearchAttributeKey.for_keyword(VERSION_ATTRIBUTE)
# What a worker runs: the code its digest covers (the API's code is not in it).
WORKER_CODE = ("workflows", "activities", "longrun", "worker")
# How long a starting worker waits for Temporal to know its version before it makes the
# version current (its first poll registers it; a second or so here).
PROMOTE_WITHIN_S = 30.0
VersionStatus = Literal["current", "ramping", "draining", "drained", "inactive"]
_STATUS: dict[int, VersionStatus] = {
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CURRENT: "current",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_RAMPING: "ramping",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINING: "draining",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_DRAINED: "drained",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_INACTIVE: "inactive",
    WorkerDeploymentVersionStatus.WORKER_DEPLOYMENT_VERSION_STATUS_CREATED: "inactive",
}


class VersionRefused(Exception):
    """Temporal would not make a version current (unknown, or it has no workers)."""


@dataclass(frozen=True)
class VersionState:
    """One version of the deployment as an operator sees it."""

    build_id: str
    status: VersionStatus  # Temporal's word
    open_runs: int  # runs on it now; 0 means its workers may stop
    workers: int  # workers polling the task queue as this version

    @property
    def stranded(self) -> bool:
        """Runs are pinned to it and no worker serves them."""
        return self.open_runs > 0 and self.workers == 0


@lru_cache
def code_digest() -> str:
    """SHA-256 of the worker's code as installed (every .py file of WORKER_CODE)."""
    digest = hashlib.sha256()
    for name in WORKER_CODE:
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            continue
        locations = spec.submodule_search_locations
        root = Path(next(iter(locations))) if locations else Path(spec.origin)
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for path in files:
            digest.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def build_id(settings: Settings) -> str:
    """This worker's version: LONGRUN_BUILD_ID, or the package version and the code's digest
    (a changed worker is another version)."""
    if settings.build_id:
        return settings.build_id
    try:
        release = importlib.metadata.version("longrun")
    except importlib.metadata.PackageNotFoundError:
        release = "0"
    return f"{release}-{code_digest()[:12]}"


def deployment_config(settings: Settings) -> WorkerDeploymentConfig | None:
    """How a worker declares its version to Temporal, its runs pinned to it; None for an
    unversioned worker."""
    if not settings.versioning:
        return None
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment, build_id(settings)),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


def version_clause(settings: Settings, build: str) -> str:
    """A visibility query clause: runs on version `build` of the deployment (runs not yet
    past their first workflow task have none)."""
    return f"{VERSION_ATTRIBUTE} = '{settings.deployment}:{build}'"


def build_of(value: str | None) -> str | None:
    """The build id in a VERSION_ATTRIBUTE value ("deployment:build id")."""
    return value.split(":", 1)[1] if value and ":" in value else None


async def promote(client: Client, settings: Settings) -> str:
    """On a worker's start: make its version current if it is new (LONGRUN_PROMOTE=new),
    whatever it is (start), or when the deployment has none yet; a version once current and
    since taken back stays back unless promote is `start`. What was decided, for the
    worker's log."""
    build = build_id(settings)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PROMOTE_WITHIN_S
    while True:
        try:
            info = await _deployment(client, settings)
        except RPCError as exc:  # workers starting together: Temporal asks to slow down
            if exc.status != RPCStatusCode.RESOURCE_EXHAUSTED:
                raise
            info = None
        summary = _summary(info, build) if info is not None else None
        if summary is not None:
            break
        if loop.time() > deadline:
            return f"Temporal does not know version {build} yet; it is not current"
        await asyncio.sleep(0.2)
    assert info is not None
    current = info.routing_config.current_deployment_version.build_id or None
    if current == build:
        return f"version {build} is current"
    if current is not None and (
        settings.promote == "manual"
        or (settings.promote == "new" and summary.HasField("first_activation_time"))
    ):
        return (
            f"version {build} waits to be made current (now {current}): "
            f"longrun deployment current {build}"
        )
    while True:
        try:
            await make_current(client, settings, build)
            return f"version {build} made current (was {current or 'none'})"
        except (VersionRefused, RPCError) as exc:
            busy = isinstance(exc, RPCError) and exc.status == RPCStatusCode.RESOURCE_EXHAUSTED
            if isinstance(exc, RPCError) and not busy:
                raise
            if loop.time() > deadline:  # its task queue not yet registered, usually
                return f"version {build} could not be made current: {exc}"
            await asyncio.sleep(0.2)


# How long a version made current may take to reach every task queue of the deployment.
ROUTING_WAIT_S = 30.0


async def make_current(client: Client, settings: Settings, build: str) -> None:
    """Start new runs on version `build` (also how a bad version is taken back): runs on
    other versions stay where they are until their next hand-over. Temporal passes the
    change to the deployment's task queues in the background (see `routed`)."""
    request = SetWorkerDeploymentCurrentVersionRequest(
        namespace=client.namespace,
        deployment_name=settings.deployment,
        build_id=build,
        identity=f"longrun@{socket.gethostname()}",
    )
    try:
        await client.workflow_service.set_worker_deployment_current_version(request)
    except RPCError as exc:
        if exc.status in (RPCStatusCode.NOT_FOUND, RPCStatusCode.FAILED_PRECONDITION):
            raise VersionRefused(exc.message) from exc
        raise


async def routed(client: Client, settings: Settings) -> bool:
    """Wait until Temporal has passed the deployment's routing to its task queues (until
    then a new run may still start on the version current before): whether it did within
    ROUTING_WAIT_S. A server that cannot say is asked again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + ROUTING_WAIT_S
    while loop.time() < deadline:
        try:
            info = await _deployment(client, settings)
        except RPCError as exc:
            log.info("asking whether the new routing reached every task queue: %s", exc)
        else:
            passing = RoutingConfigUpdateState.ROUTING_CONFIG_UPDATE_STATE_IN_PROGRESS
            if info is None or info.routing_config_update_state != passing:
                return True
        await asyncio.sleep(0.1)
    return False


async def versions(client: Client, settings: Settings) -> list[VersionState]:
    """Every version of the deployment, newest first, with its open runs and workers."""
    info = await _deployment(client, settings)
    if info is None:
        return []
    summaries = sorted(info.version_summaries, key=lambda s: -s.create_time.ToNanoseconds())
    builds = [s.deployment_version.build_id for s in summaries]
    counts = await asyncio.gather(*(_open_runs(client, settings, b) for b in builds))
    workers = await _workers(client, settings)
    return [
        VersionState(
            build_id=build,
            status=_STATUS.get(summary.status, "inactive"),
            open_runs=count,
            workers=workers.get(build, 0),
        )
        for build, summary, count in zip(builds, summaries, counts, strict=True)
    ]


async def _deployment(client: Client, settings: Settings) -> WorkerDeploymentInfo | None:
    request = DescribeWorkerDeploymentRequest(
        namespace=client.namespace, deployment_name=settings.deployment
    )
    try:
        answer = await client.workflow_service.describe_worker_deployment(request)
    except RPCError as exc:
        if exc.status == RPCStatusCode.NOT_FOUND:
            return None
        raise
    return answer.worker_deployment_info


def _summary(
    info: WorkerDeploymentInfo, build: str
) -> WorkerDeploymentInfo.WorkerDeploymentVersionSummary | None:
    for summary in info.version_summaries:
        if summary.deployment_version.build_id == build:
            return summary
    return None


async def _open_runs(client: Client, settings: Settings, build: str) -> int:
    query = (
        f"WorkflowType = '{wire.RUN_WORKFLOW}' AND ExecutionStatus = 'Running'"
        f" AND {version_clause(settings, build)}"
    )
    return (await client.count_workflows(query)).count


async def _workers(client: Client, settings: Settings) -> dict[str, int]:
    """Workers polling the task queue for runs, by build id."""
    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=settings.task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    answer = await client.workflow_service.describe_task_queue(request)
    found: dict[str, int] = {}
    for poller in answer.pollers:
        options = poller.deployment_options
        if options.deployment_name == settings.deployment and options.build_id:
            found[options.build_id] = found.get(options.build_id, 0) + 1
    return found
