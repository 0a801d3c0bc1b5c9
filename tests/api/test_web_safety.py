"""Nothing the API serves from a run acts, and a page of another site cannot use a keyless
API: artifacts are downloads that run no script, the API answers only loopback host names
and its own pages. Chromium (Debian's package) opens what a run wrote as a person would."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from playwright.async_api import Browser, Error
from temporalio.worker import Worker

from api.app import create_app
from longrun.settings import Settings
from tests.api.test_inbox_page import browser  # noqa: F401 (a fixture)
from tests.helpers import Poll, api_process

# What a hostile page a run wrote tries: approve the run's own gated step, from the API's
# origin, with the browser's standing as a loopback client.
HOSTILE_PAGE = """<!doctype html><title>report</title><script>
const run = location.pathname.split("/")[3];
fetch(`/v1/runs/${run}/approvals/apr-ship`, {method: "POST",
  headers: {"content-type": "application/json"}, body: JSON.stringify({decision: "approve"})});
</script><p>Quarterly report</p>"""


@pytest.fixture
def keyless_api(settings: Settings, tmp_path: Path) -> object:
    with api_process(settings, tmp_path) as url:
        yield url


async def test_an_artifact_page_runs_no_script_on_the_apis_origin(
    keyless_api: str,
    browser: Browser,  # noqa: F811 (the fixture imported above)
    worker: Worker,
    wait_run: Poll,
) -> None:
    steps = [
        {
            "id": "report",
            "tool": "write_file",
            "args": {"path": "out/report.html", "content": HOSTILE_PAGE},
        },
        {"id": "ship", "tool": "shell", "args": {"argv": ["true"]}, "depends_on": ["report"]},
    ]
    async with httpx.AsyncClient(base_url=keyless_api) as api:
        created = await api.post("/v1/runs", json={"goal": "report", "plan": {"steps": steps}})
        assert created.status_code == 202, created.text
        run_id = created.json()["run_id"]
        await wait_run(run_id, lambda r: r["status"] == "waiting_approval", http=api)
        url = f"{keyless_api}/v1/runs/{run_id}/artifacts/out/report.html"
        answer = await api.get(url)
        assert answer.text == HOSTILE_PAGE  # the legitimate download is whole
        assert answer.headers["content-disposition"].startswith("attachment;")
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["content-security-policy"] == "sandbox"

        context = await browser.new_context(accept_downloads=True)
        page = await context.new_page()
        async with page.expect_download() as downloading:
            with pytest.raises(Error, match="Download is starting"):
                await page.goto(url)
        assert (await downloading.value).suggested_filename == "report.html"
        # The step still waits for a person: give a script that ran time to approve.
        for _ in range(30):
            run = (await api.get(f"/v1/runs/{run_id}")).json()
            assert run["status"] == "waiting_approval", run
            await asyncio.sleep(0.1)
        await context.close()
        decided = await api.post(
            f"/v1/runs/{run_id}/approvals/apr-ship", json={"decision": "approve"}
        )
        assert decided.status_code == 202, decided.text  # the person's own decision works
        assert (await wait_run(run_id, http=api))["status"] == "completed"


@pytest.mark.parametrize(
    ("path", "script_path"),
    [("/ui/approvals", "/ui/approvals.js"), ("/ui/runs/run-x", "/ui/runs.js")],
)
async def test_the_pages_keep_no_key_where_script_can_read_it(
    api: httpx.AsyncClient, path: str, script_path: str
) -> None:
    page = await api.get(path)
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("style-src")[0]
    script = (await api.get(script_path)).text + (await api.get("/ui/page.js")).text
    assert "Storage" not in script and "<script>" not in page.text
    # What a run wrote is set as text, never parsed as markup.
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script


@pytest.mark.parametrize(
    ("headers", "refusal"),
    [
        ({"host": "rebound.example:8000"}, "loopback host names, not 'rebound.example:8000'"),
        ({"origin": "http://rebound.example"}, "not a page of 'http://rebound.example'"),
        ({"origin": "http://localhost:3000"}, "not a page of 'http://localhost:3000'"),
        ({"origin": "null"}, "not a page of 'null'"),
        ({"sec-fetch-site": "cross-site"}, "not another site's"),
    ],
)
async def test_a_keyless_api_refuses_pages_of_other_sites(
    settings: Settings, headers: dict[str, str], refusal: str
) -> None:
    transport = httpx.ASGITransport(app=create_app(settings))
    body = {"goal": "g", "plan": {"steps": [{"id": "a", "tool": "echo", "args": {}}]}}
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost:8000") as http:
        refused = await http.post("/v1/runs", json=body, headers=headers)
        assert refused.status_code == 403 and refusal in refused.json()["detail"]
        # Its own page, on its own name, is answered.
        own = {"origin": "http://localhost:8000", "sec-fetch-site": "same-origin"}
        assert (await http.get("/v1/runs", headers=own)).status_code == 200
        assert (await http.get("/v1/runs", headers={"host": "[::1]:8000"})).status_code == 200
