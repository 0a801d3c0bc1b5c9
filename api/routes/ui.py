"""Pages a person uses in a browser, served by the API itself: no CDN, no build step.

`/ui/approvals` lists what waits for a person and approves or rejects with a comment,
calling the REST API with the key typed into the page (kept for the browser tab only)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

router = APIRouter(prefix="/ui", include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "static"


@router.get("/approvals")
async def approvals_page() -> FileResponse:
    """The approvals inbox page; its data comes from GET /v1/approvals under the caller's key."""
    return FileResponse(STATIC / "approvals.html", media_type="text/html")
