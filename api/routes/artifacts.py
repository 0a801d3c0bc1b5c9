"""A run's artifacts: big step outputs, and the deliverables it wrote under `out/`."""

from __future__ import annotations

import mimetypes
import re

from fastapi import APIRouter, HTTPException
from fastapi.responses import Response
from pydantic import BaseModel
from temporalio.exceptions import ApplicationError

from activities.artifacts import LocalArtifactStore
from activities.tools.workspace import confine
from api.auth import Reader
from api.deps import SettingsDep, TemporalClient
from api.routes.runs import describe_run

router = APIRouter(prefix="/v1/runs/{run_id}/artifacts", tags=["artifacts"])

DELIVERABLES = "out"


class Artifact(BaseModel):
    """One artifact of a run."""

    name: str
    bytes: int
    kind: str  # "output" (a step's big output) or "deliverable" (a file under out/)


class ArtifactList(BaseModel):
    """A run's artifacts."""

    artifacts: list[Artifact]


@router.get("")
async def list_artifacts(
    run_id: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> ArtifactList:
    """Stored outputs (`sha256:…`) and deliverables (`out/…`) of a run."""
    await describe_run(client, run_id)
    store = LocalArtifactStore(settings.artifacts_dir)
    found = [Artifact(name=n, bytes=b, kind="output") for n, b in store.list(run_id)]
    out = settings.workspaces_dir / run_id / "workspace" / DELIVERABLES
    if out.is_dir():
        for path in sorted(p for p in out.rglob("*") if p.is_file() and not p.is_symlink()):
            name = f"{DELIVERABLES}/{path.relative_to(out).as_posix()}"
            found.append(Artifact(name=name, bytes=path.stat().st_size, kind="deliverable"))
    return ArtifactList(artifacts=found)


@router.get("/{name:path}")
async def get_artifact(
    run_id: str, name: str, client: TemporalClient, settings: SettingsDep, caller: Reader
) -> Response:
    """Download one artifact, with its content type."""
    await describe_run(client, run_id)
    try:
        if re.fullmatch(r"sha256:[0-9a-f]{64}", name):
            data = LocalArtifactStore(settings.artifacts_dir).get(run_id, name)
            media = "text/plain; charset=utf-8" if _is_text(data) else "application/octet-stream"
            return Response(data, media_type=media)
        if not name.startswith(f"{DELIVERABLES}/"):
            raise HTTPException(404, f"no artifact '{name}': names are sha256:… or out/…")
        path = confine(settings.workspaces_dir / run_id / "workspace", name)
    except (ApplicationError, ValueError) as exc:
        raise HTTPException(404, f"no artifact '{name}' in run '{run_id}'") from exc
    if not path.is_file():
        raise HTTPException(404, f"no artifact '{name}' in run '{run_id}'")
    media = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Response(path.read_bytes(), media_type=media)


def _is_text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True
