"""Big outputs live in the artifact store: history carries references, tools and models
read through them, and the API lists and serves a run's artifacts."""

from __future__ import annotations

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from tests.helpers import Poll, StandIn, submit

BIG = "ab" * 30_000  # 60,000 characters, well above the 8 KB threshold


async def test_big_outputs_leave_history_and_are_read_through(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {
                "id": "big",
                "tool": "python",
                "args": {"code": "print('ab' * 30000, end='')"},
                "requires_approval": False,
            },
            {
                "id": "save",
                "tool": "write_file",
                "args": {"path": "out/report.txt", "content": "{{steps.big.output.stdout}}"},
            },
            {"id": "ask", "model": {"prompt": "artifact-prompt: {{steps.big.output.stdout}}"}},
        ],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    ref = run["steps"][0]["output"]["stdout"]
    assert set(ref) == {"artifact", "bytes", "preview"}
    assert ref["bytes"] == len(BIG) and ref["preview"] == BIG[:200]
    # The model got the content, not the reference.
    [call] = standin.calls("artifact-prompt")
    assert call["messages"][-1]["content"] == f"artifact-prompt: {BIG}"
    # History holds references only.
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert len(history.to_json()) < 40_000
    assert BIG not in history.to_json()

    listed = (await api.get(f"/v1/runs/{run_id}/artifacts")).json()["artifacts"]
    assert {"name": ref["artifact"], "bytes": len(BIG), "kind": "output"} in listed
    assert {"name": "out/report.txt", "bytes": len(BIG), "kind": "deliverable"} in listed
    stored = await api.get(f"/v1/runs/{run_id}/artifacts/{ref['artifact']}")
    assert stored.text == BIG and stored.headers["content-type"].startswith("text/plain")
    report = await api.get(f"/v1/runs/{run_id}/artifacts/out/report.txt")
    assert report.text == BIG and report.headers["content-type"].startswith("text/plain")
    for bad in ("out/../../../etc/passwd", "sha256:" + "0" * 64, "notes.txt", "out/missing"):
        assert (await api.get(f"/v1/runs/{run_id}/artifacts/{bad}")).status_code == 404, bad
    other = "run-" + "0" * 32
    assert (await api.get(f"/v1/runs/{other}/artifacts")).status_code == 404


async def test_an_agent_reads_big_tool_results_through_their_references(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    page = "".join(f"line {i}\n" for i in range(2000))  # ~17 KB
    standin.scenario(
        [
            {
                "match": "artifact-agent",
                "role": "plan",
                "json": {"steps": [{"id": "r", "intent": "read", "expected_evidence": "e"}]},
            },
            {
                "match": "artifact-agent",
                "role": "act",
                "times": 1,
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "big.txt", "content": page}},
                    {"name": "read_file", "arguments": {"path": "big.txt"}},
                ],
            },
            {"match": "artifact-agent", "role": "act", "times": 1, "reply": "read it"},
        ]
    )
    response = await api.post(
        "/v1/runs",
        json={"goal": "artifact-agent: read big.txt", "tools": ["read_file", "write_file"]},
    )
    run_id = response.json()["run_id"]
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert "artifact" in run["steps"][1]["output"]["content"]  # stored, not in history
    seen = standin.calls("artifact-agent", role="act")[1]["messages"][-1]["content"]
    assert "line 1500" in seen  # far past any preview
    assert "[cut:" in seen and len(seen) < 16_100
