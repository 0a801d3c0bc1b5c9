"""The approvals inbox page, as a person uses it: headless Chromium (Debian's package)
drives the real page against the real API and approves a step with a comment."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, async_playwright
from temporalio.worker import Worker

from longrun.settings import Settings, hash_key
from tests.helpers import Poll, api_process

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# As the machine's closed network wants Chromium: no background connections.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SUBMITTER, APPROVER = "key-of-sam-the-submitter", "key-of-ana-the-approver"


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        await launched.close()


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    keys = [
        {"name": "sam", "sha256": hash_key(SUBMITTER), "roles": ["submitter"]},
        {"name": "ana", "sha256": hash_key(APPROVER), "roles": ["approver"]},
    ]
    with api_process(settings, tmp_path, env={"LONGRUN_API_KEYS": json.dumps(keys)}) as url:
        yield url


async def test_a_person_approves_a_step_in_the_inbox_page(
    api_url: str, browser: Browser, worker: Worker, wait_run: Poll, tmp_path: Path
) -> None:
    steps = [
        {"id": "draft", "tool": "echo", "args": {"value": "v1"}},
        {
            "id": "publish",
            "tool": "write_file",
            "depends_on": ["draft"],
            "args": {"path": "out/report.md", "content": "# Report"},
            "requires_approval": True,
        },
    ]
    sam = {"Authorization": f"Bearer {SUBMITTER}"}
    async with httpx.AsyncClient(base_url=api_url, headers=sam) as api:
        created = await api.post(
            "/v1/runs", json={"goal": "publish the report", "plan": {"steps": steps}}
        )
        run_id = created.json()["run_id"]
        await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=api)

        page = await browser.new_page()
        await page.goto(f"{api_url}/ui/approvals")
        # Without a key the API refuses, and the page says so.
        await page.wait_for_selector("#message.error")
        assert "401" in await page.inner_text("#message")
        await page.fill("#key", APPROVER)
        await page.click("text=Refresh")
        row = page.locator(f'tr[data-approval="{run_id}/apr-publish"]')
        await row.wait_for()
        assert "publish the report" in await row.inner_text()
        assert "out/report.md" in await row.inner_text()  # exactly what will run
        asked = (await api.get(f"/v1/runs/{run_id}")).json()["pending_approvals"][0]
        assert f"digest {asked['digest']}" in await row.locator("code.digest").inner_text()
        assert await page.inner_text("#message") == ""  # the refusal is gone
        await page.screenshot(path=str(tmp_path / "inbox.png"), full_page=True)
        await row.locator("input.comment").fill("read it, ship it")
        sent: list[str] = []
        page.on("request", lambda r: sent.append(r.post_data or "") if r.method == "POST" else None)
        await row.locator("button.approve").click()
        await page.wait_for_selector("#message.ok")
        assert f"approve of apr-publish ({run_id}) taken" == await page.inner_text("#message")
        await row.wait_for(state="detached")  # no longer waits

        run = await wait_run(run_id, http=api)
        assert run["status"] == "completed", run
        [decided] = run["approvals"]
        assert (decided["decided_by"], decided["comment"]) == ("ana", "read it, ship it")
        # The page's decision named the digest it showed.
        assert [json.loads(body)["digest"] for body in sent] == [asked["digest"]], sent
