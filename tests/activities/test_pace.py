"""Model calls sized by the model's pace and the run's time: a plan is asked for no more
tokens than its steps need, an answer cut short is asked again for less, and once the
model's writing pace is known a call asks for no more than it can write in the time the
run has left. The stand-in streams at a set pace, as a slow local server does."""

from __future__ import annotations

import json

import httpx
from temporalio.worker import Worker

from activities.pace import Pace, Paces
from tests.helpers import Poll, StandIn
from tests.workflows.test_agent import plan, start

WRITE_TPS = 100.0


def _rambling_plan(steps: int) -> str:
    """A plan that goes on far past any sensible length."""
    items = [
        json.dumps({"id": f"s{i}", "intent": "look around " * 20, "expected_evidence": "x"})
        for i in range(steps)
    ]
    return '{"steps": [' + ", ".join(items)


async def test_a_plan_cut_short_is_asked_again_for_fewer_steps_within_the_pace(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    standin.profile(write_tps=WRITE_TPS)
    marker = "pace-plan"
    standin.scenario(
        [
            {"match": marker, "role": "plan", "times": 1, "reply": _rambling_plan(200)},
            {"match": "cut off after", "role": "plan", "json": plan(("one", "do it"))},
        ]
    )
    run_id = await start(
        api,
        goal=f"{marker}: do one thing",
        tools=[],
        max_steps=4,
        budget={"max_duration_s": 12},
        watchdog={"phase_share": 1},  # planning may take all the time here
    )
    await wait_run(run_id, lambda r: r["phase"] != "planning")
    first, second = standin.calls(marker, role="plan")[:2]
    # A plan of at most 4 steps needs ~680 tokens, not the 32,768 a plan may have.
    assert first["max_tokens"] == 200 + 120 * 4
    assert "Plan at most 4 steps." in first["messages"][-1]["content"]
    asked = second["messages"][-1]["content"]
    assert "cut off after 680 tokens" in asked and "at most 2" in asked, asked
    # The first answer took at least 680 / 100 s: the second may take what is left of the
    # run's 12 s, and at 100 tokens a second no more than that fits.
    assert second["max_tokens"] < 680
    assert second["max_tokens"] <= WRITE_TPS * (12 - 680 / WRITE_TPS)
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert [p["id"] for p in run["plan"]] == ["one"], run
    await api.post(f"/v1/runs/{run_id}/cancel")


async def test_a_long_plan_cut_before_the_pace_was_known_is_asked_again_with_more_room(
    api: httpx.AsyncClient, worker: Worker, standin: StandIn, wait_run: Poll
) -> None:
    marker = "pace-unknown"
    steps = [(f"s{i:02}", f"Chore number {i} of a long job, done with care") for i in range(60)]
    standin.scenario([{"match": marker, "role": "plan", "json": plan(*steps)}])
    run_id = await start(
        api,
        goal=f"{marker}: sixty chores",
        tools=[],
        max_steps=100,
        models={"planner": "planner-never-called-before"},
    )
    await wait_run(run_id, lambda r: r["phase"] != "planning")
    first, second = standin.calls(marker, role="plan")[:2]
    # Before the model's pace is known a plan has room for 16 steps; the 60-step answer is
    # cut there, and the call showed a pace that writes far more in a minute.
    assert first["max_tokens"] == 200 + 120 * 16
    asked = second["messages"][-1]["content"]
    assert "before this model's pace was known" in asked and "fewer" not in asked, asked
    assert second["max_tokens"] == 200 + 120 * 100
    run = (await api.get(f"/v1/runs/{run_id}")).json()
    assert len(run["plan"]) == 60, run
    await api.post(f"/v1/runs/{run_id}/cancel")


def test_a_pace_is_learned_from_calls_and_sizes_answers() -> None:
    paces = Paces()
    assert paces.get("m") is None
    paces.record("m", prompt_tokens=1000, answer_tokens=4, first_token_s=1.0, writing_s=1.0)
    assert paces.get("m") is None  # too short an answer to say how fast it writes
    paces.record("m", prompt_tokens=1000, answer_tokens=200, first_token_s=2.0, writing_s=4.0)
    assert paces.get("m") == Pace(read_tps=500.0, write_tps=50.0)
    paces.record("m", prompt_tokens=1000, answer_tokens=100, first_token_s=1.0, writing_s=1.0)
    pace = paces.get("m")
    assert pace is not None and pace.calls == 2
    assert (pace.read_tps, pace.write_tps) == (650.0, 65.0)  # the newest weighs 0.3
    assert pace.tokens_within(prompt_tokens=650, seconds=3.0) == 130
    assert pace.tokens_within(prompt_tokens=6500, seconds=3.0) == 0
    assert pace.seconds(prompt_tokens=650, answer_tokens=130) == 3.0


def test_a_call_asked_whole_teaches_a_pace_by_its_total_time() -> None:
    paces = Paces()
    # Before any pace is known, reading is taken as ten times faster than writing:
    # 1,000 prompt tokens and 100 written in 20 s is 100 read and 10 written a second.
    paces.record_whole("m", prompt_tokens=1000, answer_tokens=100, seconds=20.0)
    assert paces.get("m") == Pace(read_tps=100.0, write_tps=10.0)
    # A call twice as slow as that pace says halves both rates (the newest weighs 0.3).
    paces.record_whole("m", prompt_tokens=1000, answer_tokens=100, seconds=40.0)
    pace = paces.get("m")
    assert pace is not None and (pace.read_tps, pace.write_tps) == (85.0, 8.5)
    paces.record_whole("m", prompt_tokens=1000, answer_tokens=3, seconds=40.0)
    assert paces.get("m") == pace  # too short an answer to say how fast it writes
