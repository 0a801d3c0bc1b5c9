"""The examples of the README and the guide, as a reader pastes them, on the offline
stand-in: the guide's plan publishes its report where the artifacts API serves it, and the
README's goal-only run completes once the approval its text names is given."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.worker import Worker

from longrun.dev.stack import SCENARIOS
from tests.helpers import REPO, Poll, StandIn

README = (REPO / "README.md").read_text()
GUIDE = (REPO / "docs" / "guide.md").read_text()


def _submitted(goal_start: str, text: str) -> dict[str, Any]:
    """The body of the `curl ... /v1/runs ... -d '…'` in `text` whose goal starts so."""
    for body in re.findall(r"-XPOST localhost:8000/v1/runs .*?-d '(\{.*?\})'", text, re.S):
        request: dict[str, Any] = json.loads(body)
        if request["goal"].startswith(goal_start):
            return request
    raise AssertionError(f"no example with a goal starting {goal_start!r}")


@pytest.fixture
def played(standin: StandIn) -> StandIn:
    """The stand-in as `make run` starts it: with the scenarios it plays offline."""
    for path in SCENARIOS:
        standin.scenario(json.loads(Path(path).read_text()))
    return standin


async def _approve_as_told(
    api: httpx.AsyncClient, wait_run: Poll, run_id: str, approval_id: str
) -> dict[str, Any]:
    run = await wait_run(run_id, lambda r: r["status"] != "running")
    assert [p["approval_id"] for p in run["pending_approvals"]] == [approval_id], run
    decided = await api.post(
        f"/v1/runs/{run_id}/approvals/{approval_id}", json={"decision": "approve"}
    )
    assert decided.status_code == 202, decided.text
    return await wait_run(run_id)


async def test_the_guides_plan_publishes_its_report(
    api: httpx.AsyncClient, worker: Worker, played: StandIn, wait_run: Poll
) -> None:
    request = _submitted("Check the model server", GUIDE)
    # The guide's stand-in address, as this test's stand-in has it.
    text = json.dumps(request).replace("http://127.0.0.1:8100", played.url)
    created = await api.post("/v1/runs", json=json.loads(text))
    assert created.status_code == 202, created.text
    run_id = created.json()["run_id"]
    told = re.search(r"/approvals/(apr-[a-z0-9-]+)", GUIDE)
    assert told is not None
    run = await _approve_as_told(api, wait_run, run_id, told.group(1))
    assert run["status"] == "completed", run
    report = re.search(r"/v1/runs/\$RUN_ID/artifacts/(\S+)", GUIDE)
    assert report is not None
    published = await api.get(f"/v1/runs/{run_id}/artifacts/{report.group(1)}")
    assert published.status_code == 200
    assert "standin-1" in published.text  # the summary of the model list it fetched


async def test_the_readme_goal_completes_on_the_stand_in(
    api: httpx.AsyncClient,
    worker: Worker,
    played: StandIn,
    wait_run: Poll,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As `make run` gives its worker: `python` is this environment's, with pytest.
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:{Path('/usr/bin')}")
    created = await api.post("/v1/runs", json=_submitted("Write a Python module primes.py", README))
    assert created.status_code == 202, created.text
    run_id = created.json()["run_id"]
    section = README.split("## One run")[1]
    told = re.search(r"longrun approve \$RUN_ID (apr-[a-z0-9-]+)", section)
    assert told is not None
    run = await _approve_as_told(api, wait_run, run_id, told.group(1))
    assert run["status"] == "completed", run
    assert {c["id"]: c["status"] for c in run["acceptance"]} == {
        "tests": "passed",
        "docstring": "passed",
    }
    # The approved step really ran the tests the stand-in wrote.
    ran = next(s for s in run["steps"] if s["id"] == told.group(1).removeprefix("apr-"))
    assert "2 passed" in ran["output"]["stdout"]
