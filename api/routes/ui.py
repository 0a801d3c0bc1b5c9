"""Pages a person uses in a browser, served by the API itself: no CDN, no build step.

`/ui/approvals` lists what waits for a person and approves or rejects with a comment;
`/ui/runs` lists runs and `/ui/runs/{id}` shows one (its steps, live events, cost and
budget, what waits for a person with the exact call and its digest) and decides or grants
there. Each calls the REST API with the key typed into the page. The key stays in the page's form
field (no storage another page of this origin could read), and the page runs no script but
its own: its Content-Security-Policy allows scripts from this origin only, and the only
other things this origin serves that a run wrote are artifacts, which run none."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

router = APIRouter(prefix="/ui", include_in_schema=False)

STATIC = Path(__file__).resolve().parent.parent / "static"


PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; "
    "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {"Content-Security-Policy": PAGE_POLICY, "X-Content-Type-Options": "nosniff"}


@router.get("/approvals")
async def approvals_page() -> FileResponse:
    """The approvals inbox page; its data comes from GET /v1/approvals under the caller's key."""
    return FileResponse(STATIC / "approvals.html", media_type="text/html", headers=PAGE_HEADERS)


@router.get("/page.js")
async def page_script() -> FileResponse:
    """What the pages' scripts share: the key, requests' headers, messages, text cells."""
    return FileResponse(STATIC / "page.js", media_type="text/javascript", headers=PAGE_HEADERS)


@router.get("/approvals.js")
async def approvals_script() -> FileResponse:
    """The inbox page's script."""
    return FileResponse(STATIC / "approvals.js", media_type="text/javascript", headers=PAGE_HEADERS)


@router.get("/runs")
async def runs_page() -> FileResponse:
    """The runs list page; its data comes from GET /v1/runs under the caller's key."""
    return FileResponse(STATIC / "runs.html", media_type="text/html", headers=PAGE_HEADERS)


@router.get("/runs/{run_id}")
async def run_page(run_id: str) -> FileResponse:
    """One run's page (the same page: its script reads the run id from the address)."""
    return FileResponse(STATIC / "runs.html", media_type="text/html", headers=PAGE_HEADERS)


@router.get("/runs.js")
async def runs_script() -> FileResponse:
    """The runs pages' script."""
    return FileResponse(STATIC / "runs.js", media_type="text/javascript", headers=PAGE_HEADERS)
