"""A run's artifacts: big step outputs, and the deliverables it wrote under `out/`."""

from __future__ import annotations

import logging
import mimetypes
import re
from pathlib import PurePosixPath
from urllib.parse import quote

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from temporalio.client import WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError

from api import access
from api.access import Admin, Reader
from api.deps import SettingsDep, TemporalClient
from api.schemas import answers
from longrun import beneath
from longrun.artifacts import store_for
from longrun.settings import Settings

log = logging.getLogger("longrun.api")

router = APIRouter(
    prefix="/v1/runs/{run_id}/artifacts", tags=["artifacts"], responses=answers(401, 403, 503)
)

DELIVERABLES = "out"


class Artifact(BaseModel):
    """One artifact of a run."""

    name: str
    bytes: int
    kind: str  # "output" (a step's big output) or "deliverable" (a file under out/)


class ArtifactList(BaseModel):
    """A run's artifacts."""

    artifacts: list[Artifact]


class Deleted(BaseModel):
    """How many stored outputs a deletion removed."""

    deleted: int


@router.get("", responses=answers(404))
async def list_artifacts(
    run_id: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> ArtifactList:
    """Stored outputs (`sha256:…`) and deliverables (`out/…`) of a run."""
    await access.run_for(client, caller, "read", run_id)
    # The store may be a bucket across the network and the workspace a shared volume:
    # neither is read on the event loop.
    return await run_in_threadpool(_listing, settings, run_id)


def _listing(settings: Settings, run_id: str) -> ArtifactList:
    store = store_for(settings)
    found = [Artifact(name=n, bytes=b, kind="output") for n, b in store.list(run_id)]
    out = settings.workspaces_dir / run_id / "workspace" / DELIVERABLES
    if out.is_dir():
        for path in sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink()):
            name = f"{DELIVERABLES}/{path.relative_to(out).as_posix()}"
            found.append(Artifact(name=name, bytes=path.stat().st_size, kind="deliverable"))
    return ArtifactList(artifacts=found)


@router.get(
    "/{name:path}",
    response_class=Response,
    responses={
        200: {
            "description": "the artifact, with its content type",
            "content": {"*/*": {"schema": {"type": "string", "format": "binary"}}},
        },
        **answers(404),
    },
)
async def get_artifact(
    run_id: str, name: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> Response:
    """Download one artifact, with its content type (always as an attachment)."""
    await access.run_for(client, caller, "read", run_id)
    try:
        if re.fullmatch(r"sha256:[0-9a-f]{64}", name):
            data = await run_in_threadpool(store_for(settings).get, run_id, name)
            media = "text/plain; charset=utf-8" if _is_text(data) else "application/octet-stream"
            return download(data, media, name.replace(":", "-"))
        if not name.startswith(f"{DELIVERABLES}/"):
            raise HTTPException(404, f"no artifact '{name}': names are sha256:… or out/…")
        workspace = settings.workspaces_dir / run_id / "workspace"
        content, _ = await run_in_threadpool(beneath.read_beneath, workspace, name, -1)
    except (ApplicationError, OSError, ValueError) as exc:
        raise HTTPException(404, f"no artifact '{name}' in run '{run_id}'") from exc
    filename = PurePosixPath(name).name
    media = mimetypes.guess_type(filename)[0] or "application/octet-stream"
    return download(content, media, filename)


def download(content: bytes, media: str, filename: str) -> Response:
    """An artifact as a download that cannot act: a run wrote it, so a browser must neither
    render it as a page of the API's origin nor guess it is one, and if opened anyway it runs
    no script and has no origin (CSP sandbox)."""
    return Response(
        content,
        media_type=media,
        headers={
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(filename)}",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": "sandbox",
        },
    )


@router.delete("", responses=answers(404, 409))
async def delete_artifacts(
    run_id: str, client: TemporalClient, settings: SettingsDep, caller: Admin
) -> Deleted:
    """Delete an ended run's stored outputs (`sha256:…`); its `out/` deliverables stay."""
    _, desc = await access.run_for(client, caller, "delete", run_id)
    # An open run may still read its outputs through references (and continue-as-new
    # carries them), so deleting them would break it.
    if desc.status == WorkflowExecutionStatus.RUNNING:
        raise HTTPException(409, f"run '{run_id}' is still open; delete its artifacts once it ends")
    deleted = await run_in_threadpool(store_for(settings).delete_run, run_id)
    log.info("%s deleted the %d stored outputs of run %s", caller.name, deleted, run_id)
    return Deleted(deleted=deleted)


def _is_text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
