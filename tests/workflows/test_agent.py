"""Goal-only runs: the agent plans, acts through tools, verifies, replans and proves the
goal met, driven by scripted stand-in scenarios over real HTTP and a real Temporal server."""

from __future__ import annotations

from typing import Any

import httpx
from temporalio.client import Client
from temporalio.worker import Worker

from longrun.digests import call_digest
from longrun.policy import Policy
from tests.helpers import Poll, StandIn
from tests.workflows.test_replay import replays_and_is_kept

PRIMES = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n"


def plan(*steps: tuple[str, str]) -> dict[str, Any]:
    return {
        "steps": [{"id": i, "intent": t, "expected_evidence": f"{t} is done"} for i, t in steps]
    }


def act(
    marker: str, *calls: tuple[str, dict[str, Any]], reply: str | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"match": marker, "role": "act", "times": 1}
    if calls:
        rule["tool_calls"] = [{"name": n, "arguments": a} for n, a in calls]
    if reply is not None:
        rule["reply"] = reply
    return rule


async def start(api: httpx.AsyncClient, **body: Any) -> str:
    response = await api.post("/v1/runs", json=body)
    assert response.status_code == 202, response.text
    run_id: str = response.json()["run_id"]
    return run_id


async def audit_of(api: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = (await api.get(f"/v1/runs/{run_id}/audit")).json()["entries"]
    return entries


async def verdicts_of(api: httpx.AsyncClient, run_id: str) -> list[dict[str, Any]]:
    """The run's step verifications, as its `step.verified` events say them."""
    page = {"limit": 500, "wait_s": 5}
    events = (await api.get(f"/v1/runs/{run_id}/events/page", params=page)).json()["events"]
    return [e["data"] for e in events if e["type"] == "step.verified"]


def file_contains(criterion_id: str, path: str, text: str) -> dict[str, Any]:
    """A criterion checked by reading `path`, which must contain `text`."""
    check = {"tool": "read_file", "args": {"path": path}, "expect": {"contains": text}}
    return {"id": criterion_id, "check": check}


PRIMES_ACCEPTANCE = [
    file_contains("module", "primes.py", "def is_prime"),
    {"id": "docstring", "check": {"judge": "primes.py explains itself"}},
]


async def test_goal_with_several_tool_calls_completes(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    goal = "agent-happy: write primes.py with is_prime"
    standin.scenario(
        [
            {
                "match": "agent-happy",
                "role": "plan",
                "json": plan(("write", "write primes.py"), ("look", "read it back")),
            },
            act("agent-happy", ("write_file", {"path": "primes.py", "content": PRIMES})),
            act("agent-happy", reply="wrote primes.py"),
            act("agent-happy", ("read_file", {"path": "primes.py"})),
            act("agent-happy", reply="primes.py reads back fine"),
        ]
    )
    run_id = await start(
        api, goal=goal, acceptance=PRIMES_ACCEPTANCE, tools=["read_file", "write_file"]
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert [p["status"] for p in run["plan"]] == ["completed", "completed"]
    assert [(c["id"], c["status"]) for c in run["acceptance"]] == [
        ("module", "passed"),
        ("docstring", "passed"),
    ]
    assert [s["status"] for s in run["steps"]] == ["completed", "completed"]
    assert run["steps"][1]["output"]["content"] == PRIMES
    assert run["premature_completions"] == 0
    assert run["phase"] == "completing"
    assert len(standin.calls("agent-happy", role="act")) == 4
    # Every call is counted, planner, actor and judge alike.
    assert run["usage"]["model_calls"] == len(standin.calls("agent-happy"))


async def test_premature_done_is_caught_fed_back_and_counted(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [
            {"match": "agent-eager", "role": "plan", "json": plan(("write", "write primes.py"))},
            act("agent-eager", ("finish", {"summary": "all done already"})),
            act("agent-eager", ("write_file", {"path": "primes.py", "content": PRIMES})),
        ]
    )
    run_id = await start(
        api,
        goal="agent-eager: write primes.py",
        acceptance=PRIMES_ACCEPTANCE[:1],
        tools=["write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert run["premature_completions"] == 1
    assert run["figures"]["premature_completions"] == 1  # where task metrics read it
    acts = standin.calls("agent-eager", role="act")
    assert len(acts) == 2  # done once the write made the criterion pass
    # The failed claim went back to the model with the evidence.
    fed_back = acts[1]["messages"][-1]
    assert fed_back["role"] == "tool"
    assert "Not finished" in fed_back["content"] and "primes.py" in fed_back["content"]
    assert run["acceptance"][0]["status"] == "passed"
    assert run["result"]["summary"] == "every acceptance criterion passes after write_file"


async def test_failing_verification_replans_then_asks_a_person(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-stuck"
    # Every step verification fails until a person has given guidance.
    rules: list[dict[str, Any]] = [
        {"match": marker, "role": "plan", "json": plan(("try", "make it work"))},
        {
            "match": "This step is done",
            "role": "judge",
            "times": 6,
            "json": {"passed": False, "reason": "output.txt is missing"},
        },
    ]
    standin.scenario(rules)
    run_id = await start(
        api,
        goal=f"{marker}: produce output.txt",
        # A judge's criterion: a last step whose criteria are all tools' is theirs to prove.
        acceptance=[{"id": "out", "check": {"judge": "output.txt holds ok"}}],
        tools=["write_file"],
    )
    run = await wait_run(run_id, lambda r: r["status"] != "running")
    assert run["status"] == "waiting_approval", run
    [help_request] = run["pending_approvals"]
    assert help_request["kind"] == "needs_help"
    assert "output.txt is missing" in help_request["summary"]
    assert run["replans"] == 2
    assert len(standin.calls(marker, role="plan")) == 3  # the plan and two replans
    assert [p["status"] for p in run["plan"]] == ["failed", "failed", "waiting_approval"]

    standin.scenario([act("Guidance:", ("write_file", {"path": "output.txt", "content": "ok"}))])
    response = await api.post(
        f"/v1/runs/{run_id}/approvals/{help_request['approval_id']}",
        json={"decision": "approve", "comment": "write ok into output.txt"},
    )
    assert response.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    guided = standin.calls("Guidance:", role="act")
    assert "write ok into output.txt" in guided[0]["messages"][1]["content"]


async def test_a_replan_the_planner_cannot_make_asks_a_person(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-noreplan"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "times": 1, "json": plan(("try", "make it"))},
            {"match": marker, "role": "plan", "reply": "no more plans"},
            {
                "match": "This step is done",
                "role": "judge",
                "times": 2,
                "json": {"passed": False, "reason": "nothing was made"},
            },
        ]
    )
    run_id = await start(api, goal=f"{marker}: make it", tools=[])
    run = await wait_run(run_id, lambda r: r["status"] != "running")
    assert run["status"] == "waiting_approval", run["error"]
    [help_request] = run["pending_approvals"]
    assert help_request["kind"] == "needs_help"
    assert "replanning failed" in help_request["summary"]
    assert "no valid plan in 3 attempts" in help_request["summary"]
    response = await api.post(
        f"/v1/runs/{run_id}/approvals/{help_request['approval_id']}",
        json={"decision": "approve", "comment": "just say it is made"},
    )
    assert response.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed", run["error"]
    assert run["replans"] == 1


async def test_malformed_plan_json_is_reasked_and_recovered(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [
            {"match": "agent-garbled", "role": "plan", "times": 1, "reply": "here is a plan: {"},
            {"match": "agent-garbled", "role": "plan", "times": 1, "json": {"steps": []}},
            {"match": "agent-garbled", "role": "plan", "json": plan(("only", "say hi"))},
            act("agent-garbled", reply="hi"),
        ]
    )
    run_id = await start(api, goal="agent-garbled: say hi", tools=[])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    plans = standin.calls("agent-garbled", role="plan")
    assert len(plans) == 3
    second = plans[1]["messages"][-1]["content"]
    assert "previous answer was not a valid plan" in second and "here is a plan" in second
    # With no criteria given, a judge had to confirm the goal itself.
    assert [c["id"] for c in run["acceptance"]] == ["goal"]


async def test_a_planner_that_never_answers_valid_json_fails_the_run(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.rule(match="agent-hopeless", role="plan", reply="I would rather not")
    run_id = await start(api, goal="agent-hopeless: anything", tools=[], strategy="plan")
    run = await wait_run(run_id)
    assert run["status"] == "failed"
    assert "no valid plan in 3 attempts" in run["error"]
    assert "I would rather not" in run["error"]
    assert len(standin.calls("agent-hopeless", role="plan")) == 3


async def test_a_tool_outside_the_allowlist_is_refused_and_the_model_told(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll, settings: Any
) -> None:
    standin.scenario(
        [
            {"match": "agent-sneaky", "role": "plan", "json": plan(("look", "look around"))},
            act("agent-sneaky", ("shell", {"argv": ["touch", "pwned"]})),
            act("agent-sneaky", reply="fine, I looked without the shell"),
        ]
    )
    run_id = await start(api, goal="agent-sneaky: look around", tools=["read_file"])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    [refused] = run["steps"]
    assert refused["status"] == "skipped" and "not in this run's tools" in refused["error"]
    told = standin.calls("agent-sneaky", role="act")[1]["messages"][-1]
    assert told["role"] == "tool" and "not allowed in this run" in told["content"]
    assert not (settings.workspaces_dir / run_id / "workspace" / "pwned").exists()
    assert standin.calls("agent-sneaky", role="act")[0]["tools"] == ["read_file", "finish"]


async def test_usage_is_priced_from_the_settings_table(
    settings: Any, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    from api.app import create_app
    from longrun.contracts import Price

    priced = settings.model_copy(update={"prices": {"test-model": Price(input=2.0, output=8.0)}})
    transport = httpx.ASGITransport(app=create_app(priced))
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as api:
        standin.scenario(
            [
                {"match": "agent-priced", "role": "plan", "json": plan(("one", "say hi"))},
                act("agent-priced", reply="hi"),
            ]
        )
        run_id = await start(api, goal="agent-priced: say hi", tools=[])
        run = await wait_run(run_id, http=api)
    usage = run["usage"]
    assert run["status"] == "completed"
    expected = (usage["input_tokens"] * 2.0 + usage["output_tokens"] * 8.0) / 1_000_000
    assert usage["cost_usd"] == round(expected, 6) > 0


async def test_arguments_an_agent_must_not_send_are_refused_without_running(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    deep = "[" * 5000 + "]" * 5000
    standin.scenario(
        [
            {"match": "agent-odd", "role": "plan", "json": plan(("one", "try things"))},
            act("agent-odd", ("read_file", deep)),
            act(
                "agent-odd",
                ("http_request", {"url": "http://127.0.0.1:1/", "headers": {"A": {"secret": "x"}}}),
            ),
            act("agent-odd", reply="gave up on those"),
        ]
    )
    run_id = await start(api, goal="agent-odd: try", tools=["read_file", "http_request"])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    told = [c["messages"][-1]["content"] for c in standin.calls("agent-odd", role="act")[1:]]
    assert "Invalid arguments for read_file" in told[0]
    assert "secrets are for plan steps" in told[1]
    assert run["steps"] == []  # nothing ran


async def test_a_note_written_early_is_recalled_where_it_matters(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    fact = "The deploy token lives in vault path ops/deploy"
    standin.scenario(
        [
            {
                "match": "agent-memory",
                "role": "plan",
                "json": plan(
                    ("learn", "look around"),
                    ("filler", "tidy the workspace"),
                    ("use", "recall the vault path of the token"),
                ),
            },
            act("agent-memory", ("note", {"text": fact, "kind": "fact"})),
            act("agent-memory", reply="noted where the token lives"),
            act("agent-memory", reply="tidied"),
            act("agent-memory", reply="used it"),
        ]
    )
    run_id = await start(api, goal="agent-memory: deploy", tools=["note"])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    acts = standin.calls("agent-memory", role="act")
    use_brief = next(
        c["messages"][1]["content"]
        for c in acts
        if "Your step now: recall the vault path of the token" in c["messages"][1]["content"]
    )
    assert "Notes from the journal" in use_brief
    assert fact in use_brief


async def test_verification_outlasts_a_model_outage_as_model_calls_do(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # The judge answers 503 eight times running: more than a check's five attempts of old.
    goal = "agent-judge-outage: write primes.py"
    standin.scenario(
        [
            {
                "match": "agent-judge-outage",
                "role": "judge",
                "status": 503,
                "retry_after": 0.1,
                "times": 8,
            },
            {"match": "agent-judge-outage", "role": "plan", "json": plan(("write", "write it"))},
            act("agent-judge-outage", ("write_file", {"path": "primes.py", "content": PRIMES})),
            act("agent-judge-outage", reply="wrote primes.py"),
        ]
    )
    run_id = await start(
        api, goal=goal, acceptance=PRIMES_ACCEPTANCE, tools=["read_file", "write_file"]
    )
    run = await wait_run(run_id, timeout_s=120)
    assert run["status"] == "completed", run["error"]
    judged = standin.calls("agent-judge-outage", role="judge")
    assert len(judged) >= 9  # eight refused, then answered


async def test_a_decision_bound_to_an_earlier_call_is_refused(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-digest"
    url = f"{standin.base_url}/orders"
    first = {"method": "POST", "url": url, "body": {"qty": 1}}
    second = {"method": "POST", "url": url, "body": {"qty": 2}}
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("order", "send the order"))},
            act(marker, ("http_request", first)),
            act(marker, ("http_request", second)),
            act(marker, reply="the order went out"),
            {
                "match": "This step is done",
                "role": "judge",
                "json": {"quote": "orders", "passed": True, "reason": "it was sent"},
            },
        ]
    )
    run_id = await start(api, goal=f"{marker}: send the order", tools=["http_request"])
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    [asked] = run["pending_approvals"]
    # The digest binds the tool, its arguments and the policy in force.
    assert asked["arguments"] == {"tool": "http_request", "args": first}
    assert asked["digest"] == call_digest("http_request", asked["arguments"], Policy().digest())
    seen = asked["digest"]
    rejected = await api.post(
        f"/v1/runs/{run_id}/approvals/{asked['approval_id']}",
        json={"decision": "reject", "digest": seen},
    )
    assert rejected.status_code == 202, rejected.text
    # The agent finds another way: the same step asks for another call, with another digest.
    run = await wait_run(
        run_id,
        lambda r: (
            r["status"] == "waiting_approval"
            and r["pending_approvals"][0]["approval_id"] != asked["approval_id"]
        ),
    )
    [again] = run["pending_approvals"]
    assert again["arguments"]["args"] == second and again["digest"] != seen
    stale = await api.post(
        f"/v1/runs/{run_id}/approvals/{again['approval_id']}",
        json={"decision": "approve", "digest": seen},
    )
    assert stale.status_code == 409 and "for another call now" in stale.text, stale.text
    malformed = await api.post(
        f"/v1/runs/{run_id}/approvals/{again['approval_id']}",
        json={"decision": "approve", "digest": "not-a-digest"},
    )
    assert malformed.status_code == 422
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert run["status"] == "waiting_approval" and run["pending_approvals"] == [again]
    taken = await api.post(
        f"/v1/runs/{run_id}/approvals/{again['approval_id']}",
        json={"decision": "approve", "digest": again["digest"]},
    )
    assert taken.status_code == 202, taken.text
    run = await wait_run(run_id)
    approvals = [e for e in await audit_of(api, run_id) if e["action"] == "approve"]
    assert [again["digest"] in e["detail"] for e in approvals] == [True], approvals


async def test_a_plan_written_loosely_is_repaired_and_each_repair_audited(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # As Qwen2.5-Coder-0.5B wrote plans on llama.cpp: a list for the plan, a sentence for
    # an id, no evidence; the server was not asked to enforce either.
    loose = [{"id": "Write hello into file", "intent": "write hello.txt", "expected_evidence": ""}]
    standin.scenario(
        [
            {"match": "agent-loose", "role": "plan", "json": loose},
            act("agent-loose", ("write_file", {"path": "hello.txt", "content": "hello"})),
        ]
    )
    run_id = await start(
        api, goal="agent-loose: write hello.txt", acceptance=HELLO, tools=["write_file"]
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert len(standin.calls("agent-loose", role="plan")) == 1
    [step] = run["plan"]
    assert step["id"] == "write-hello-into-file"
    assert "write hello.txt" in step["expected_evidence"]
    audit = await audit_of(api, run_id)
    [repaired] = [e["detail"] for e in audit if e["action"] == "plan repaired"]
    assert "a list of steps taken as the plan" in repaired
    assert "'Write hello into file' made 'write-hello-into-file'" in repaired
    assert "evidence derived from its intent" in repaired


HELLO = [file_contains("hello", "hello.txt", "hello")]


async def test_with_no_valid_plan_an_auto_run_works_on_the_goal_and_is_done_when_done(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [
            {"match": "agent-unplanned", "role": "plan", "reply": "I cannot plan"},
            # The right file at once; were the run to go on, the model would write it again.
            act("agent-unplanned", ("write_file", {"path": "hello.txt", "content": "hello"})),
            act("agent-unplanned", ("write_file", {"path": "hello.txt", "content": "hello"})),
        ]
    )
    # Two sentences: more than `auto` acts on without asking for a plan.
    goal = "agent-unplanned: write hello into hello.txt. Then say so."
    run_id = await start(
        api, goal=goal, acceptance=HELLO, tools=["write_file", "read_file"], strategy="auto"
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert len(standin.calls("agent-unplanned", role="plan")) == 3
    [step] = run["plan"]
    assert (step["id"], step["intent"], step["status"]) == ("goal", goal, "completed")
    audit = await audit_of(api, run_id)
    [direct] = [e["detail"] for e in audit if e["action"] == "direct"]
    assert "no valid plan in 3 attempts" in direct and "I cannot plan" in direct
    # The acceptance check ran after the write and passed: no second turn, no judge.
    acts = standin.calls("agent-unplanned", role="act")
    assert len(acts) == 1
    assert standin.calls("agent-unplanned", role="judge") == []
    assert run["acceptance"][0]["status"] == "passed"
    # The goal is said once: no plan of one step, no step repeating it.
    prompt = acts[0]["messages"][1]["content"]
    assert prompt.count("write hello into hello.txt") == 1
    assert "Plan:" not in prompt and "Your step now" not in prompt
    await replays_and_is_kept(client, run_id, "agent_direct_done_when_done")

    # This worker has seen the model plan badly: the next auto run goes direct unasked.
    standin.scenario(
        [act("agent-unplanned-2", ("write_file", {"path": "hello.txt", "content": "hello"}))]
    )
    again = await start(
        api,
        goal="agent-unplanned-2: write hello.txt. Then say so.",
        acceptance=HELLO,
        tools=["write_file"],
        strategy="auto",
    )
    run = await wait_run(again)
    assert run["status"] == "completed", run
    assert standin.calls("agent-unplanned-2", role="plan") == []
    audit = await audit_of(api, again)
    [direct] = [e["detail"] for e in audit if e["action"] == "direct"]
    assert "gave no valid plan in its last 3 answers" in direct


async def test_an_auto_run_acts_on_a_goal_of_one_short_sentence_without_a_plan(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [act("agent-small", ("write_file", {"path": "hello.txt", "content": "hello"}))]
    )
    goal = "agent-small: write hello into hello.txt."
    run_id = await start(api, goal=goal, acceptance=HELLO, tools=["write_file"], strategy="auto")
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert standin.calls("agent-small", role="plan") == []
    assert [(p["id"], p["intent"]) for p in run["plan"]] == [("goal", goal)]
    audit = await audit_of(api, run_id)
    assert [e["detail"] for e in audit if e["action"] == "direct"] == [
        "the goal is one short sentence: one step"
    ]
    # A longer goal is planned.
    standin.scenario([{"match": "agent-long", "role": "plan", "json": plan(("w", "write"))}])
    longer = await start(
        api,
        goal="agent-long: write hello into hello.txt. Then read it back and say what it holds.",
        acceptance=HELLO,
        tools=["write_file"],
        strategy="auto",
    )
    run = await wait_run(longer, lambda r: r["plan"] != [])
    assert standin.calls("agent-long", role="plan") and run["plan"][0]["id"] != "goal", run
    await api.post(f"/v1/runs/{longer}/cancel")


async def test_a_direct_run_asks_no_planner(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.scenario(
        [act("agent-direct", ("write_file", {"path": "hello.txt", "content": "hello"}))]
    )
    run_id = await start(
        api,
        goal="agent-direct: hello.txt",
        acceptance=HELLO,
        tools=["write_file"],
        strategy="direct",
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert standin.calls("agent-direct", role="plan") == []
    assert [p["id"] for p in run["plan"]] == ["goal"]


async def test_a_goal_asking_for_a_change_does_not_complete_without_one(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # As Qwen did once: "Goal met." with no tool call. Nothing but a judge checks the goal,
    # and a judge reads claims: the run goes on until a call changed something.
    standin.scenario(
        [
            {"match": "agent-idle", "role": "plan", "json": plan(("do", "write the haiku"))},
            act("agent-idle", ("finish", {"summary": "Goal met."})),
            act("agent-idle", ("write_file", {"path": "haiku.txt", "content": "runs outlive"})),
            act("agent-idle", ("finish", {"summary": "wrote haiku.txt"})),
        ]
    )
    run_id = await start(api, goal="agent-idle: write a haiku into haiku.txt", tools=["write_file"])
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert run["premature_completions"] == 1
    acts = standin.calls("agent-idle", role="act")
    told = acts[1]["messages"][-1]["content"]
    assert "no tool call of this run has changed anything yet" in told
    assert run["result"]["summary"] == "wrote haiku.txt"
    assert [s["status"] for s in run["steps"]] == ["completed"]
    await replays_and_is_kept(client, run_id, "agent_no_completion_without_a_change")


async def test_a_change_that_misses_a_criterion_is_told_so_at_once(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # As Qwen did: "Hello world!" six times over, for a check that wants "hello"; told
    # nothing after each write, it had nothing to go on.
    standin.scenario(
        [
            act("agent-told", ("write_file", {"path": "hello.txt", "content": "Hello world!"})),
            act("agent-told", ("write_file", {"path": "hello.txt", "content": "hello"})),
        ]
    )
    run_id = await start(
        api, goal="agent-told: hello.txt", acceptance=HELLO, tools=["write_file"], strategy="direct"
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    acts = standin.calls("agent-told", role="act")
    assert len(acts) == 2
    told = acts[1]["messages"][-1]["content"]
    assert "Acceptance criteria still failing" in told and "hello" in told


async def test_a_call_a_person_rejected_is_not_asked_again(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # As Qwen did in goal-order-rejected: the same rejected POST asked for again and again
    # until the budget ran out; a person said no to that exact call once.
    echo = ("shell", {"argv": ["echo", "order"]})
    standin.scenario(
        [
            act("agent-no", echo),
            act("agent-no", echo),
            act("agent-no", reply="a person said no: the order cannot be placed"),
        ]
    )
    run_id = await start(api, goal="agent-no: echo order", tools=["shell"], strategy="direct")
    run = await wait_run(run_id, lambda r: r["status"] == "waiting_approval")
    [pending] = run["pending_approvals"]
    response = await api.post(
        f"/v1/runs/{run_id}/approvals/{pending['approval_id']}",
        json={"decision": "reject", "comment": "no orders today"},
    )
    assert response.status_code == 202
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert len(run["approvals"]) == 1 and run["pending_approvals"] == []
    told = standin.calls("agent-no", role="act")[2]["messages"][-1]["content"]
    assert "already rejected this exact call" in told
    await replays_and_is_kept(client, run_id, "agent_rejected_not_asked_again")


async def test_a_step_asking_for_a_tools_work_with_no_tool_run_fails_without_the_judge(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-claims"
    standin.scenario(
        [
            {
                "match": marker,
                "role": "plan",
                "json": plan(("write", "Write ok into out.txt"), ("tell", "Say it is done")),
            },
            # A claim with nothing to show for it, then the write asked for.
            act(marker, reply="I wrote ok into out.txt."),
            act("no tool ran in this step", ("write_file", {"path": "out.txt", "content": "ok"})),
            act(marker, reply="wrote it"),
            # Only the write's step and the step that needs no tool reach the judge.
            {
                "match": "This step is done",
                "role": "judge",
                "json": {"quote": "out.txt", "passed": True, "reason": "the write says so"},
            },
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt and say so",
        acceptance=[{"id": "said", "check": {"judge": "the agent said it is done"}}],
        tools=["write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    first, second = run["plan"]
    assert first["status"] == "completed" and second["status"] == "completed", run["plan"]
    verified = await verdicts_of(api, run_id)
    assert [v["passed"] for v in verified] == [False, True, True], verified
    assert verified[0]["evidence"].startswith("no tool ran in this step"), verified[0]
    # The claim never reached the judge: the write's step and the step needing no tool did.
    judged = standin.calls("This step is done", role="judge")
    assert len(judged) == 2 and not any("I wrote ok" in str(c["messages"]) for c in judged)
    await replays_and_is_kept(client, run_id, "agent_step_without_a_tool_not_passed")


async def test_a_judges_pass_quoting_no_tool_output_does_not_pass_the_step(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "agent-quotes"
    claim = "I wrote ok into out.txt."
    standin.scenario(
        [
            {"match": marker, "role": "plan", "json": plan(("write", "Write ok into out.txt"))},
            act(marker, ("write_file", {"path": "out.txt", "content": "ok"})),
            act(marker, reply=claim),
            # A pass that quotes the agent's own claim shows nothing...
            {
                "match": "This step is done",
                "role": "judge",
                "times": 1,
                "json": {"quote": claim, "passed": True, "reason": "the agent says so"},
            },
            # ...one quoting what the write returned does.
            {
                "match": "This step is done",
                "role": "judge",
                "json": {"quote": '"path": "out.txt"', "passed": True, "reason": "written"},
            },
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write ok into out.txt",
        acceptance=[{"id": "said", "check": {"judge": "out.txt was written"}}],
        tools=["write_file"],
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    verified = await verdicts_of(api, run_id)
    assert [v["passed"] for v in verified] == [False, True], verified
    assert verified[0]["evidence"].startswith(f"the judge passed it quoting '{claim}'")
    # The step's second attempt ran no tool: the write of its first is still its evidence.
    [_, second] = standin.calls("This step is done", role="judge")
    assert "out.txt" in str(second["messages"]) and len(run["steps"]) == 1
    await replays_and_is_kept(client, run_id, "agent_step_evidence_kept")


async def test_a_claim_made_again_with_nothing_changed_is_not_checked_again(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # As Qwen did on the README's example: `finish` claimed eight times in a row, each claim
    # a test run and a judge's call, the same failure each time, until the budget ran out.
    marker = "agent-claims-again"
    standin.scenario(
        [
            act(marker, ("write_file", {"path": "sum.txt", "content": "12 + 58"})),
            act(marker, ("finish", {"summary": "sum.txt holds the sum"})),
            act(marker, ("finish", {"summary": "sum.txt holds the sum, really"})),
            act(marker, ("write_file", {"path": "sum.txt", "content": "70"})),
            act(marker, ("finish", {"summary": "sum.txt holds 70"})),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write the sum of 12 and 58 into sum.txt",
        acceptance=[
            file_contains("sum", "sum.txt", "70"),
            {"id": "number", "check": {"judge": "sum.txt holds a number"}},
        ],
        tools=["write_file"],
        strategy="direct",
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert run["premature_completions"] == 2
    # Checked twice, not three times: the second claim was answered with the first's failures.
    assert len(standin.calls(marker, role="judge")) == 2
    told = standin.calls(marker, role="act")[3]["messages"][-1]["content"]
    assert "nothing has changed since these acceptance criteria failed" in told, told
    assert "sum: output does not contain '70'" in told
    await replays_and_is_kept(client, run_id, "agent_unchanged_claim_not_rechecked")


async def test_a_last_step_claimed_done_is_left_to_its_tool_checks_not_the_judge(
    api: httpx.AsyncClient, client: Client, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    # As Qwen did on goal-sum: the expression written, then "done"; each judge's verdict took
    # a minute of its 600 s, and said less than the check's own failure does.
    marker = "agent-checked"
    standin.scenario(
        [
            act(marker, ("write_file", {"path": "sum.txt", "content": "12 + 58"})),
            act(marker, reply="sum.txt holds the sum"),
            act(marker, ("write_file", {"path": "sum.txt", "content": "70"})),
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: write the sum of 12 and 58 into sum.txt",
        acceptance=[file_contains("sum", "sum.txt", "70")],
        tools=["write_file"],
        strategy="direct",
    )
    run = await wait_run(run_id)
    assert run["status"] == "completed", run
    assert standin.calls(marker, role="judge") == []
    acts = standin.calls(marker, role="act")
    assert len(acts) == 3
    # The claim went straight to the check, whose failure the model was told, with the
    # goal itself to work on again (no step name a model could take for a tool).
    told = acts[2]["messages"][-1]["content"]
    assert "sum: output does not contain '70'" in told and "Make the failing" not in told
    assert run["premature_completions"] == 1
    assert [(p["id"], p["intent"]) for p in run["plan"]] == [
        ("goal", f"{marker}: write the sum of 12 and 58 into sum.txt"),
        ("fix-1", f"{marker}: write the sum of 12 and 58 into sum.txt"),
    ]
    # The check is told in words: a small model copied `{"contains": "70"}` into files.
    first = "\n".join(str(m["content"]) for m in acts[0]["messages"])
    said = (
        'sum: at the end, read_file is called with path sum.txt, and its output must contain "70"'
    )
    assert said in first and '{"contains"' not in first, first
    await replays_and_is_kept(client, run_id, "agent_fix_restates_the_goal")
    await replays_and_is_kept(client, run_id, "agent_criteria_in_prose")
