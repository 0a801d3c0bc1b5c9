"""The run pages, as a person uses them: headless Chromium drives /ui/runs and
/ui/runs/{id} against the real API: the run's steps and its events as they come, a
hostile step output shown as text, and a decision that names the digest it showed and
grants the next calls."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser
from temporalio.worker import Worker

from longrun.settings import Settings, hash_key
from tests.api.test_inbox_page import browser  # noqa: F401 - the same Chromium
from tests.helpers import Poll, api_process

SUBMITTER, APPROVER = "key-of-sam-the-submitter", "key-of-ana-the-approver"
HOSTILE = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


@pytest.fixture
def api_url(settings: Settings, tmp_path: Path) -> Iterator[str]:
    keys = [
        {"name": "sam", "sha256": hash_key(SUBMITTER), "roles": ["submitter", "viewer"]},
        {"name": "ana", "sha256": hash_key(APPROVER), "roles": ["approver", "viewer"]},
    ]
    with api_process(settings, tmp_path, env={"LONGRUN_API_KEYS": json.dumps(keys)}) as url:
        yield url


async def test_a_person_follows_a_run_and_approves_on_its_page(
    api_url: str,
    browser: Browser,  # noqa: F811
    worker: Worker,
    wait_run: Poll,
    tmp_path: Path,
) -> None:
    send = {"id": "send", "tool": "echo", "args": {"value": "order 1"}, "requires_approval": True}
    steps = [
        {"id": "fetched", "tool": "echo", "args": {"value": HOSTILE}},
        {**send, "depends_on": ["fetched"]},
        {**send, "id": "again", "depends_on": ["send"]},
    ]
    sam = {"Authorization": f"Bearer {SUBMITTER}"}
    async with httpx.AsyncClient(base_url=api_url, headers=sam) as api:
        created = await api.post(
            "/v1/runs", json={"goal": "send the order", "plan": {"steps": steps}}
        )
        run_id = created.json()["run_id"]
        await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=api)

        page = await browser.new_page()
        dialogs: list[str] = []
        page.on("dialog", lambda d: dialogs.append(d.message))
        await page.goto(f"{api_url}/ui/runs")
        await page.wait_for_selector("#message.error")  # no key: the API refuses, it says so
        await page.fill("#key", APPROVER)
        await page.click("#key-form button")
        await page.click(f'a[href="/ui/runs/{run_id}"]')
        await page.wait_for_url(f"**/ui/runs/{run_id}")
        await page.fill("#key", APPROVER)
        await page.click("#key-form button")
        row = page.locator('tr[data-approval="apr-send"]')
        await row.wait_for()
        asked = (await api.get(f"/v1/runs/{run_id}")).json()["pending_approvals"][0]
        assert f"digest {asked['digest']}" in await row.inner_text()
        assert "order 1" in await row.inner_text()  # the exact call
        # What the run wrote is shown as text: no element, no script ran.
        fetched = page.locator('tr[data-step="fetched"]')
        shown = await fetched.inner_text()
        assert "<img src=x onerror=" in shown and "<script>document.title=" in shown
        assert await page.locator("#steps img, #steps script").count() == 0
        # Events came as they happened.
        await page.locator('tr[data-type="approval.requested"]').wait_for()
        await page.screenshot(path=str(tmp_path / "run-page.png"), full_page=True)

        sent: list[str] = []
        page.on("request", lambda r: sent.append(r.post_data or "") if r.method == "POST" else None)
        await row.locator("input.uses").fill("1")
        await row.locator("button.grant").click()
        await page.wait_for_selector("#message.ok")
        # The decision named the digest shown; its grant let the next, same call through.
        body = json.loads(sent[0])
        assert body["digest"] == asked["digest"] and body["decision"] == "approve"
        assert body["grant"] == {"args": {"value": {"equals": "order 1"}}, "uses": 1}
        await page.locator('tr[data-type="run.ended"]').wait_for(timeout=30_000)
        run = await wait_run(run_id, http=api)
        assert run["status"] == "completed", run
        assert [s["status"] for s in run["steps"]] == ["completed"] * 3
        assert len(run["approvals"]) == 1  # the second send ran under the grant
        assert await page.title() != "pwned" and dialogs == []
