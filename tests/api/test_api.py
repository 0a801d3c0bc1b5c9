"""The REST front door: validation, ids, idempotency, listing, errors, health."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as examples
from hypothesis import strategies as st
from openapi_spec_validator import validate
from temporalio.client import Client
from temporalio.worker import Worker

from api import access
from api.app import create_app
from longrun.settings import Settings
from tests.helpers import Poll, submit

ECHO = {"id": "a", "tool": "echo", "args": {"value": 1}}


async def _count_runs(client: Client, settings: Settings) -> int:
    count = await client.count_workflows(f"TaskQueue = '{settings.task_queue}'")
    return count.count


def _locs(response: httpx.Response) -> list[list[Any]]:
    assert response.status_code == 422, response.text
    return [e["loc"] for e in response.json()["detail"]]


@pytest.mark.parametrize(
    ("steps", "loc", "reason"),
    [
        ([{"id": "a", "tool": "nope"}], ["body", "plan", "steps", 0, "tool"], "unknown tool"),
        (
            [{"id": "a", "tool": "shell", "args": {"argv": "rm -rf /"}}],
            ["body", "plan", "steps", 0, "args", "argv"],
            "valid list",
        ),
        (
            [{"id": "a", "tool": "echo", "args": {"bogus": 1}}],
            ["body", "plan", "steps", 0, "args", "bogus"],
            "Extra inputs",
        ),
        ([ECHO, ECHO], ["body", "plan", "steps", 1, "id"], "duplicate step id"),
        (
            [{"id": "Bad Id!", "tool": "echo"}],
            ["body", "plan", "steps", 0, "id"],
            "should match pattern",
        ),
        (
            [
                {"id": "a", "tool": "echo", "depends_on": ["b"]},
                {"id": "b", "tool": "echo", "depends_on": ["a"]},
            ],
            ["body", "plan", "steps", 0, "depends_on"],
            "dependency cycle: a -> b -> a",
        ),
        (
            [{"id": "a", "tool": "echo", "depends_on": ["zz"]}],
            ["body", "plan", "steps", 0, "depends_on", 0],
            "unknown step 'zz'",
        ),
        (
            [
                {"id": "a", "tool": "echo"},
                {"id": "b", "tool": "echo", "depends_on": []},
                {"id": "c", "tool": "echo", "args": {"value": "{{steps.a.output.value}}"}},
            ],
            ["body", "plan", "steps", 2, "args", "value"],
            "not among this step's dependencies",
        ),
        (
            [ECHO, {"id": "b", "model": {"prompt": "{{ steps.a.outputs }}"}}],
            ["body", "plan", "steps", 1, "model", "prompt"],
            "malformed reference",
        ),
        (
            [{"id": "a", "tool": "echo", "model": {"prompt": "x"}}],
            ["body", "plan", "steps", 0],
            "exactly one of tool, model, wait, approval",
        ),
        ([], ["body", "plan", "steps"], "at least 1 item"),
        (
            [{"id": "a", "wait": {"seconds": -1}}],
            ["body", "plan", "steps", 0, "wait", "seconds"],
            "greater than or equal to 0",
        ),
    ],
)
async def test_invalid_plans_are_refused_and_start_nothing(
    api: httpx.AsyncClient,
    client: Client,
    settings: Settings,
    steps: list[dict[str, Any]],
    loc: list[Any],
    reason: str,
) -> None:
    response = await api.post("/v1/runs", json={"goal": "g", "plan": {"steps": steps}})
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(e["loc"] == loc and reason in e["msg"] for e in errors), errors
    assert await _count_runs(client, settings) == 0


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"plan": {"steps": [ECHO]}}, ["body", "goal"]),
        ({"goal": "", "plan": {"steps": [ECHO]}}, ["body", "goal"]),
        ({"goal": "g", "tools": ["read_file", "nope"]}, ["body", "tools", 1]),
        ({"goal": "g", "plan": {"steps": [ECHO]}, "max_steps": 3}, ["body", "max_steps"]),
        ({"goal": "g", "max_steps": 0}, ["body", "max_steps"]),
        (
            {"goal": "g", "acceptance": [{"id": "c", "check": {"judge": "x"}}] * 2},
            ["body", "acceptance", 1, "id"],
        ),
        (
            {"goal": "g", "acceptance": [{"id": "c", "check": {"tool": "shell", "args": {}}}]},
            ["body", "acceptance", 0, "check", "ToolCheck", "expect"],
        ),
        (
            {
                "goal": "g",
                "acceptance": [
                    {"id": "c", "check": {"tool": "zz", "args": {}, "expect": {"exit_code": 0}}}
                ],
            },
            ["body", "acceptance", 0, "check", "tool"],
        ),
        ({"goal": "g", "plan": {"steps": [ECHO]}, "labels": {"Bad Key": "x"}}, None),
        ({"goal": "g", "plan": {"steps": [ECHO]}, "labels": {"team": "o'ps"}}, None),
        ({"goal": "g", "plan": {"steps": [ECHO]}, "extra": 1}, ["body", "extra"]),
        ([1, 2], ["body"]),
    ],
)
async def test_malformed_bodies_get_422(
    api: httpx.AsyncClient, body: Any, loc: list[Any] | None
) -> None:
    response = await api.post("/v1/runs", json=body)
    locs = _locs(response)
    if loc is not None:
        assert loc in locs
    else:
        assert all(item[:2] == ["body", "labels"] for item in locs), locs


async def test_oversized_body_is_refused(
    api: httpx.AsyncClient, client: Client, settings: Settings
) -> None:
    huge = "x" * (settings.max_request_bytes + 1)
    response = await api.post("/v1/runs", json={"goal": "g", "plan": {"steps": [ECHO]}, "h": huge})
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body"]
    assert "limit" in response.json()["detail"][0]["msg"]

    async def chunks() -> Any:  # no Content-Length: the limit still holds while streaming
        for _ in range(settings.max_request_bytes // 65536 + 2):
            yield b"x" * 65536

    response = await api.post(
        "/v1/runs", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert await _count_runs(client, settings) == 0


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"a": value}
    return value


STEP = ("body", "plan", "steps", 0)


@pytest.mark.parametrize(
    ("raw", "loc", "says"),
    [
        # A lone surrogate is valid JSON but not Unicode text: nothing could carry it on.
        (
            '{"goal": "\\ud800", "plan": {"steps": [{"id": "a", "tool": "echo"}]}}',
            ("body", "goal"),
            "surrogate",
        ),
        (
            '{"goal": "g", "plan": {"steps": [{"id": "a", "tool": "echo", '
            '"args": {"value": "x\\udfff"}}]}}',
            (*STEP, "args", "value"),
            "surrogate",
        ),
        (
            '{"goal": "g", "labels": {"\\ud800": "x"}}',
            ("body", "labels", "\ud800"),
            "surrogate",
        ),
        (
            '{"goal": "g", "plan": {"steps": [{"id": "w", "wait": {"seconds": NaN}}]}}',
            (*STEP, "wait", "seconds"),
            "finite",
        ),
        (
            '{"goal": "g", "plan": {"steps": [{"id": "w", "wait": {"seconds": 1e999}}]}}',
            (*STEP, "wait", "seconds"),
            "finite",
        ),
        (
            '{"goal": "g", "budget": {"max_cost_usd": -Infinity}}',
            ("body", "budget", "max_cost_usd"),
            "finite",
        ),
        (
            json.dumps(
                {
                    "goal": "g",
                    "plan": {
                        "steps": [{"id": "a", "tool": "echo", "args": {"value": _nested(200)}}]
                    },
                }
            ),
            (*STEP, "args", "value", *["a"] * 59),  # the first value past 64 levels
            "nested deeper than 64",
        ),
        ("[" * 10_000 + "]" * 10_000, ("body",), "nested deeper than 64"),
        (b'{"goal": "\xff"}', ("body",), "not UTF-8"),
    ],
)
@pytest.mark.parametrize(
    "media",
    [
        "application/json",
        "APPLICATION/JSON",
        "Application/Json; Charset=UTF-8",
        "application/vnd.api+JSON",
        "text/plain",
        None,
    ],
)
async def test_hostile_json_gets_a_clear_422_with_its_path_and_starts_nothing(
    api: httpx.AsyncClient,
    client: Client,
    settings: Settings,
    raw: str | bytes,
    loc: tuple[str | int, ...],
    says: str,
    media: str | None,
) -> None:
    headers = {"content-type": media} if media is not None else {}
    response = await api.post("/v1/runs", content=raw, headers=headers)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == list(loc) and says in error["msg"], error
    assert await _count_runs(client, settings) == 0


def _media_types() -> st.SearchStrategy[str | None]:
    """JSON media types as clients write them: any case, with or without parameters."""
    base = st.sampled_from(["application/json", "application/problem+json", "text/plain"])
    cased = st.tuples(base, st.randoms()).map(
        lambda pair: "".join(c.upper() if pair[1].random() < 0.5 else c for c in pair[0])
    )
    params = st.sampled_from(["", "; charset=utf-8", ";CHARSET=UTF-8", "; q=1; x=y"])
    return st.one_of(st.none(), st.tuples(cased, params).map("".join))


HOSTILE = {"nan": "NaN", "inf": "-Infinity", "big": "1e999", "lone": '"x\\ud800"'}


@examples(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    media=_media_types(),
    keys=st.lists(st.text("abcdefgh", min_size=1, max_size=4), min_size=0, max_size=5),
    hostile=st.sampled_from(sorted(HOSTILE)),
)
async def test_a_hostile_value_anywhere_under_any_label_is_refused_where_it_is(
    api: httpx.AsyncClient,
    client: Client,
    settings: Settings,
    media: str | None,
    keys: list[str],
    hostile: str,
) -> None:
    # A run request whose echo step carries the value `keys` deep in its arguments.
    inner = "__HOSTILE__"
    value: Any = inner
    for key in reversed(keys):
        value = {key: value}
    body = json.dumps(
        {"goal": "g", "plan": {"steps": [{"id": "a", "tool": "echo", "args": {"value": value}}]}}
    )
    raw = body.replace(json.dumps(inner), HOSTILE[hostile])
    headers = {"content-type": media} if media is not None else {}
    response = await api.post("/v1/runs", content=raw, headers=headers)
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert error["loc"] == ["body", "plan", "steps", 0, "args", "value", *keys], error
    assert await _count_runs(client, settings) == 0


async def test_a_long_plan_whose_dependencies_run_against_list_order_is_taken(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    # Step i depends on step i+1: a 1,000-deep chain the checks must walk without recursion.
    steps = [
        {"id": f"s{i}", "tool": "echo", "depends_on": [f"s{i + 1}"] if i < 999 else []}
        for i in range(1000)
    ]
    response = await api.post("/v1/runs", json={"goal": "g", "plan": {"steps": steps}})
    assert response.status_code == 202, response.text
    cyclic = [*steps[:-1], {**steps[-1], "depends_on": ["s0"]}]
    response = await api.post("/v1/runs", json={"goal": "g", "plan": {"steps": cyclic}})
    assert response.status_code == 422
    assert "dependency cycle: s0 -> s1 -> s2" in response.text


async def test_idempotency_key_returns_the_same_run(
    api: httpx.AsyncClient, client: Client, settings: Settings
) -> None:
    body = {"goal": "idem", "plan": {"steps": [ECHO]}}
    headers = {"Idempotency-Key": f"key-{settings.task_queue}"}
    first = await api.post("/v1/runs", json=body, headers=headers)
    second = await api.post("/v1/runs", json=body, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["run_id"] == second.json()["run_id"]
    other = await api.post("/v1/runs", json={**body, "goal": "something else"}, headers=headers)
    assert other.status_code == 409
    assert "Idempotency-Key" in other.json()["detail"]
    assert await _count_runs(client, settings) == 1
    without = await api.post("/v1/runs", json=body)
    assert without.json()["run_id"] != first.json()["run_id"]


async def test_unknown_ids_are_404(api: httpx.AsyncClient, worker: Worker, wait_run: Poll) -> None:
    for path in ("/v1/runs/run-0123456789abcdef0123456789abcdef", "/v1/runs/nonsense"):
        assert (await api.get(path)).status_code == 404
    missing = "/v1/runs/run-0123456789abcdef0123456789abcdef"
    decision = {"decision": "approve"}
    assert (await api.post(f"{missing}/approvals/apr-x", json=decision)).status_code == 404
    assert (await api.post(f"{missing}/cancel")).status_code == 404

    run_id = await submit(api, [{"id": "gate", "approval": {"message": "go?"}}])
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    response = await api.post(f"/v1/runs/{run_id}/approvals/apr-nope", json=decision)
    assert response.status_code == 404
    bad = await api.post(f"/v1/runs/{run_id}/approvals/apr-gate", json={"decision": "maybe"})
    assert bad.status_code == 422


async def test_second_decision_is_409_and_changes_nothing(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        api,
        [
            {"id": "gate", "approval": {"message": "ship it?"}},
            {"id": "after", "tool": "echo", "args": {"value": "{{steps.gate.output.comment}}"}},
        ],
    )
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    url = f"/v1/runs/{run_id}/approvals/apr-gate"
    first = await api.post(url, json={"decision": "approve", "comment": "yes"})
    assert first.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed"
    assert run["steps"][1]["output"] == {"value": "yes"}
    again = await api.post(url, json={"decision": "reject"})
    assert again.status_code == 409
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert run["approvals"][0]["decision"] == "approve"
    assert (await api.post(f"/v1/runs/{run_id}/cancel")).status_code == 409


async def test_concurrent_decisions_take_exactly_one(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(api, [{"id": "gate", "approval": {"message": "ship it?"}}])
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    url = f"/v1/runs/{run_id}/approvals/apr-gate"
    # Ten approvals and ten rejections at once, each a different comment.
    bodies = [
        {"decision": "approve" if i % 2 else "reject", "comment": f"caller {i}"} for i in range(20)
    ]
    answers = await asyncio.gather(*(api.post(url, json=b) for b in bodies))
    won = [b for b, r in zip(bodies, answers, strict=True) if r.status_code == 202]
    assert len(won) == 1, [r.status_code for r in answers]
    assert sorted(r.status_code for r in answers) == [202] + [409] * 19
    # Every other caller is told what won (and, once it has, that the run ended).
    won_by = f"approval 'apr-gate' was already decided: {won[0]['decision']} by local"
    lost = [r.json()["detail"] for r in answers if r.status_code == 409]
    assert all(detail.startswith(won_by) for detail in lost), lost
    run = await wait_run(run_id)
    [record] = run["approvals"]
    assert (record["decision"], record["comment"]) == (won[0]["decision"], won[0]["comment"])
    audit = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    assert [e["action"] for e in audit].count(won[0]["decision"]) == 1


async def test_pause_and_resume_are_taken_once_and_refused_when_they_change_nothing(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(api, [{"id": "gate", "approval": {"message": "go?"}}])
    await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    url = f"/v1/runs/{run_id}"
    not_paused = await api.post(f"{url}/resume")
    assert (not_paused.status_code, not_paused.json()["detail"]) == (409, "the run is not paused")
    pauses = await asyncio.gather(*(api.post(f"{url}/pause") for _ in range(5)))
    assert sorted(r.status_code for r in pauses) == [202, 409, 409, 409, 409]
    resumes = await asyncio.gather(*(api.post(f"{url}/resume") for _ in range(5)))
    assert sorted(r.status_code for r in resumes) == [202, 409, 409, 409, 409]
    budget = await api.post(f"{url}/budget", json={"max_tool_calls": 5})
    assert budget.status_code == 202
    await api.post(f"{url}/approvals/apr-gate", json={"decision": "approve"})
    assert (await wait_run(run_id))["status"] == "completed"
    for action in ("pause", "resume"):
        ended = await api.post(f"{url}/{action}")
        assert ended.status_code == 409 and "already ended" in ended.json()["detail"]
    # The API started the run, so it decides without describing it first: the run, ended,
    # refuses the signal, and the answer names the decision taken.
    late = await api.post(f"{url}/approvals/apr-gate", json={"decision": "reject"})
    assert late.status_code == 409, late.text
    assert late.json()["detail"] == (
        f"approval 'apr-gate' was already decided: approve by local; run '{run_id}' "
        "has already ended"
    )
    unknown = await api.post(f"{url}/approvals/apr-none", json={"decision": "approve"})
    assert unknown.status_code == 404, unknown.text


async def test_a_waiting_run_reads_the_same_from_its_query_alone_as_described(
    api: httpx.AsyncClient, worker: Worker, wait_run: Poll
) -> None:
    run_id = await submit(
        api, [ECHO, {"id": "gate", "approval": {"message": "go?"}, "depends_on": ["a"]}]
    )
    # The API started it, so it knows whose it is: at rest, its query alone answers.
    from_query = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    access._known.pop(run_id)  # as an API process that has not seen it would read it
    described = (await api.get(f"/v1/runs/{run_id}")).json()
    assert run_id in access._known  # and then it has
    for read in (from_query, described):
        read.pop("usage")  # its duration goes on
    assert from_query == described
    assert from_query["links"]["self"] == f"/v1/runs/{run_id}" and from_query["retrying"] == []


async def test_list_filters_by_status_and_label_and_paginates(
    api: httpx.AsyncClient, worker: Worker, settings: Settings, wait_run: Poll
) -> None:
    team = settings.task_queue.replace("test-", "t")
    done = [await submit(api, [ECHO], labels={"team": team}) for _ in range(3)]
    for run_id in done:
        await wait_run(run_id)
    gated = await submit(api, [{"id": "g", "approval": {"message": "?"}}], labels={"team": team})
    await wait_run(gated, lambda r: r["status"] == "waiting_approval")

    for _ in range(100):
        response = await api.get(
            "/v1/runs", params={"label": f"team:{team}", "status": "completed"}
        )
        if len(response.json()["runs"]) == 3:
            break
        await asyncio.sleep(0.1)
    assert sorted(r["run_id"] for r in response.json()["runs"]) == sorted(done)
    waiting = await api.get(
        "/v1/runs", params={"label": f"team:{team}", "status": "waiting_approval"}
    )
    assert [r["run_id"] for r in waiting.json()["runs"]] == [gated]

    page1 = (await api.get("/v1/runs", params={"label": f"team:{team}", "page_size": 2})).json()
    assert len(page1["runs"]) == 2 and page1["next_page_token"]
    page2 = (
        await api.get(
            "/v1/runs",
            params={
                "label": f"team:{team}",
                "page_size": 2,
                "page_token": page1["next_page_token"],
            },
        )
    ).json()
    seen = [r["run_id"] for r in page1["runs"] + page2["runs"]]
    assert sorted(seen) == sorted([*done, gated])
    # Newest first: the live run, then ended runs by most recent end.
    assert seen[0] == gated
    ends = [r["closed_at"] for r in page1["runs"][1:] + page2["runs"]]
    assert ends == sorted(ends, reverse=True)

    for params in (
        {"label": "no-colon"},
        {"label": "team:o'x"},
        {"label": "team:ops\n"},
        {"status": "bogus"},
    ):
        assert (await api.get("/v1/runs", params=params)).status_code == 422
    # Tokens this listing did not give out are refused at once, without asking Temporal.
    other = {"label": "team:elsewhere", "page_token": page1["next_page_token"]}
    for params in ({"page_token": "%%%"}, {"page_token": "AAAA"}, other):
        response = await api.get("/v1/runs", params=params)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["query", "page_token"]


async def test_temporal_unreachable_is_503(settings: Settings) -> None:
    dead = settings.model_copy(update={"temporal_address": "127.0.0.1:1"})
    transport = httpx.ASGITransport(app=create_app(dead))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        assert (await http.get("/healthz")).status_code == 200
        ready = await http.get("/readyz")
        assert ready.status_code == 503
        response = await http.post("/v1/runs", json={"goal": "g", "plan": {"steps": [ECHO]}})
        assert response.status_code == 503
        assert "unreachable" in response.json()["detail"]
        # A bad request is still a bad request.
        bad = await http.post("/v1/runs", json={"goal": "g", "plan": {"steps": [ECHO, ECHO]}})
        assert bad.status_code == 422


async def test_health_and_docs(api: httpx.AsyncClient) -> None:
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    ready = (await api.get("/readyz")).json()
    assert ready["status"] == "ready" and ready["process_tools"]["mode"] == "bwrap"
    listed = (await api.get("/v1/tools")).json()
    assert listed["process_tools"] == ready["process_tools"]
    spec = (await api.get("/openapi.json")).json()
    assert "/v1/runs/{run_id}/approvals/{approval_id}" in spec["paths"]


async def test_the_openapi_document_describes_each_tools_arguments(api: httpx.AsyncClient) -> None:
    spec = (await api.get("/openapi.json")).json()
    validate(spec)  # still a valid OpenAPI document
    schemas = spec["components"]["schemas"]
    tools = (await api.get("/v1/tools")).json()["tools"]
    mapping = schemas["ToolStep"]["discriminator"]["mapping"]
    assert sorted(mapping) == sorted(t["name"] for t in tools)
    for tool in tools:
        step = schemas[mapping[tool["name"]].removeprefix("#/components/schemas/")]
        assert step["properties"]["tool"]["const"] == tool["name"]
        args = schemas[step["properties"]["args"]["$ref"].removeprefix("#/components/schemas/")]
        assert args["properties"] == {
            name: _relocated(field, tool["name"])
            for name, field in tool["args_schema"]["properties"].items()
        }
    # A plan's step is a tool step (by `tool`), a model, wait or approval step.
    kinds = [ref["$ref"] for ref in schemas["Step"]["oneOf"]]
    assert kinds == [f"#/components/schemas/{k}Step" for k in ("Tool", "Model", "Wait", "Approval")]
    plan = schemas["Plan"]["properties"]["steps"]["items"]
    assert plan == {"$ref": "#/components/schemas/Step"}
    # Each described step is taken as described: an http_request step with its arguments.
    http = schemas["ToolArgs.http_request"]
    assert {"url", "method"} <= set(http["properties"]) and http["required"] == ["url"]


def _relocated(schema: Any, tool: str) -> Any:
    """A tool's argument schema with its references as the OpenAPI document has them."""
    if isinstance(schema, dict):
        return {
            k: v.replace("#/$defs/", f"#/components/schemas/ToolArgs.{tool}.")
            if k == "$ref"
            else _relocated(v, tool)
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_relocated(v, tool) for v in schema]
    return schema


async def test_the_docs_pages_need_nothing_from_the_internet(api: httpx.AsyncClient) -> None:
    for page in ("/docs", "/redoc"):
        html = (await api.get(page)).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html)
        assert sources, page
        for source in sources:
            assert not source.startswith(("http:", "https:", "//")), (page, source)
            served = await api.get(source)
            assert served.status_code == 200 and len(served.content) > 1000, source
