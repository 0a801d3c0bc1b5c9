"""Retry and fork: a new run of a plan run that takes over steps it completed (their recorded
outputs; not run again, not charged again). A retry of a failed or cancelled run goes on
from the first step that did not complete; a fork of an ended run goes on from a chosen
step, optionally with that step and later ones changed."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from typing import Annotated, Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError
from starlette.concurrency import run_in_threadpool
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionDescription, WorkflowHandle

from api import access
from api.access import Submitter
from api.admission import start_run, under_policy_in_force
from api.auth import Principal
from api.deps import McpHubDep, PolicyDep, SettingsDep, TemporalClient
from api.mcp_tools import mcp_tools_for, plan_tools
from api.reading import (
    fail_validation,
    query_run,
    run_links,
    run_status_of,
    stored_part,
)
from api.schemas import RunCreated, answers
from longrun import refs, wire
from longrun.artifacts import store_for
from longrun.catalogue import toolbox
from longrun.contracts import (
    FINAL_RUN_STATUSES,
    STEP_ID_PATTERN,
    AgentCarry,
    AgentSpec,
    CompletedCall,
    CriterionState,
    Plan,
    PlanItem,
    RecordedCall,
    Reuse,
    RoleModels,
    RunInput,
    RunState,
    Step,
    StepQuery,
    StepState,
)
from longrun.plans import ReferenceError_, resolve, validate_plan
from longrun.recording import recorded_calls
from longrun.settings import Settings

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=answers(401, 403, 503))

RETRYABLE = ("failed", "cancelled")
# Of the recorded tool calls a counterfactual fork carries in its input.
REPLAY_MAX_BYTES = 256 * 1024
DONE = ("completed", "skipped")


class RetryCreated(RunCreated):
    """The new run a retry or fork started."""

    retry_of: str = Field(description="the run it retries or forks")
    reused: list[str] = Field(description="the steps it takes over, done, from that run")
    replays: int | None = Field(
        None, description="a counterfactual fork's: how many recorded tool calls it answers from"
    )


class ForkRequest(BaseModel):
    """Where a fork goes on from, and what it changes."""

    model_config = ConfigDict(extra="forbid", strict=True)

    from_step: Annotated[str, StringConstraints(pattern=STEP_ID_PATTERN)] | None = Field(
        None,
        description="run again from this step: it and every step that depends on it (unset: "
        "from the start, nothing taken over)",
    )
    plan_patch: list[Step] | None = Field(
        None,
        max_length=1000,
        description="steps that replace the plan's steps of the same id, or are added; only "
        "steps that run again may change",
    )
    compensate: bool = Field(
        False,
        description="first undo, newest first, the reversible calls the forked run made in "
        "the steps that run again",
    )
    guidance: str | None = Field(
        None,
        min_length=1,
        max_length=4000,
        description="a goal-only run's: what its agent is told at the step it goes on from",
    )
    model: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="the model the fork uses instead: a goal-only run's for every role (unless "
        "`models` names one), a plan run's for every model step that runs again",
    )
    models: RoleModels | None = Field(
        None, description="a goal-only run's: models per role (planner, actor, judge)"
    )
    replay_tools: bool = Field(
        False,
        description="answer a tool call with the same tool and arguments as one of the run's "
        "from that call's recorded output, with no side effect (a counterfactual fork); other "
        "calls follow policy as usual",
    )

    def changes(self) -> bool:
        """Whether the fork changes anything but where it goes on from."""
        return bool(self.plan_patch or self.model or self.models or self.replay_tools)


@router.post("/{run_id}/retry", status_code=202, responses=answers(404, 409))
async def retry_run(
    run_id: str,
    client: TemporalClient,
    settings: SettingsDep,
    policy: PolicyDep,
    caller: Submitter,
) -> RetryCreated:
    """Start a new run of a failed or cancelled run: the steps it completed count as done
    with their recorded outputs, and the new run goes on from the first that did not (a
    goal-only run's agent from the first step of its plan that did not)."""
    handle, desc, inp = await _ended_run(
        client, caller, run_id, RETRYABLE, "a failed or cancelled run"
    )
    if inp.agent is not None:
        inp = under_policy_in_force(inp, None, policy, caller)
        assert inp.agent is not None
        state = await _final_state(settings, run_id, desc, handle)
        carry = _agent_carry(state, inp.agent, None, None)
        return await _start_agent_again(client, settings, run_id, inp, carry, caller, "retry_of")
    assert inp.plan is not None
    done = await _done_steps(settings, run_id, desc, handle, [s.id for s in inp.plan.steps])
    again = {s.id for s in inp.plan.steps} - set(done)
    inp = under_policy_in_force(inp, again, policy, caller)
    return await _start_again(client, settings, run_id, inp, done, caller, "retry_of")


async def _start_again(
    client: Client,
    settings: Settings,
    run_id: str,
    inp: RunInput,
    done: dict[str, StepState],
    caller: Principal,
    link: str,
    undo: list[CompletedCall] | None = None,
    replay: list[RecordedCall] | None = None,
) -> RetryCreated:
    """Start the new run of plan run `inp`, taking over the `done` steps of `run_id`, for
    `caller` (`inp` checked for it: `under_policy_in_force`)."""
    assert inp.plan is not None
    reuse = Reuse(run_id=run_id, steps=done, undo=undo or [], tools=replay or [])
    return await _launch(client, settings, inp, reuse, caller, link, list(done))


async def _start_agent_again(
    client: Client,
    settings: Settings,
    run_id: str,
    inp: RunInput,
    carry: AgentCarry | None,
    caller: Principal,
    link: str,
    replay: list[RecordedCall] | None = None,
) -> RetryCreated:
    """Start the new goal-only run of `inp`, its agent going on as `carry` says."""
    reuse = Reuse(run_id=run_id, steps={}, agent=carry, tools=replay or [])
    taken = [item.id for item in carry.plan[: carry.index]] if carry is not None else []
    return await _launch(client, settings, inp, reuse, caller, link, taken)


async def _launch(
    client: Client,
    settings: Settings,
    inp: RunInput,
    reuse: Reuse,
    caller: Principal,
    link: str,
    reused: list[str],
) -> RetryCreated:
    """Start `inp` again as a new run, for `caller`, with what it takes over (the stored
    values its outputs refer to copied in); its memo names the run it starts again under
    `link` (retry_of, fork_of)."""
    new_id = f"run-{uuid.uuid4().hex}"
    outputs = [s.output for s in reuse.steps.values()] + [c.output for c in reuse.tools]
    await run_in_threadpool(_copy_artifacts, settings, reuse.run_id, new_id, outputs)
    again = inp.model_copy(
        update={"run_id": new_id, **caller.as_owner(), "carry": None, "reuse": reuse}
    )
    await start_run(client, settings, again, **{link: reuse.run_id})
    return RetryCreated(
        run_id=new_id,
        status="running",
        links=run_links(settings, new_id),
        retry_of=reuse.run_id,
        reused=reused,
        replays=len(reuse.tools) if link == "fork_of" and reuse.tools else None,
    )


@router.post("/{run_id}/fork", status_code=202, responses=answers(404, 409))
async def fork_run(
    run_id: str,
    body: ForkRequest,
    client: TemporalClient,
    settings: SettingsDep,
    policy: PolicyDep,
    hub: McpHubDep,
    caller: Submitter,
) -> RetryCreated:
    """Start a new run of an ended run from `from_step` (or from the start): the steps it
    completed that neither are that step nor depend on it are taken over; the rest run, as
    patched, on `model` if given. A goal-only run's agent goes on from that step of its
    plan, with `guidance` (or plans afresh). With `replay_tools`, a call the run made is
    answered from its recorded output instead of running again: a counterfactual fork."""
    if body.from_step is None and not body.changes():
        raise fail_validation(
            ("body",),
            "say where the fork goes on from (from_step) or what it changes "
            "(model, models, replay_tools, plan_patch)",
        )
    handle, desc, inp = await _ended_run(client, caller, run_id, FINAL_RUN_STATUSES, "an ended run")
    if inp.agent is not None:
        for name in ("plan_patch", "compensate"):
            if getattr(body, name):
                raise fail_validation(("body", name), f"'{name}' applies to plan runs")
        if body.guidance is not None and body.from_step is None:
            raise fail_validation(("body", "guidance"), "guidance is given at 'from_step'")
        inp = _on_models(inp, inp.agent, body.model, body.models)
        inp = under_policy_in_force(inp, None, policy, caller)
        assert inp.agent is not None
        carry = None  # from the start: the agent plans afresh
        if body.from_step is not None:
            state = await _final_state(settings, run_id, desc, handle)
            guidance = f"{caller.name}: {body.guidance}" if body.guidance else None
            carry = _agent_carry(state, inp.agent, body.from_step, guidance)
        replay = await _recorded(client, run_id, inp) if body.replay_tools else None
        return await _start_agent_again(
            client, settings, run_id, inp, carry, caller, "fork_of", replay
        )
    for name in ("guidance", "models"):
        if getattr(body, name) is not None:
            raise fail_validation(("body", name), f"'{name}' applies to goal-only runs")
    assert inp.plan is not None
    ids = [s.id for s in inp.plan.steps]
    if body.from_step is not None and body.from_step not in ids:
        raise fail_validation(
            ("body", "from_step"), f"run '{run_id}' has no step '{body.from_step}'"
        )
    again = set(ids) if body.from_step is None else _with_dependents(inp.plan, body.from_step)
    patch = {s.id: s for s in body.plan_patch or []}
    if len(patch) != len(body.plan_patch or []):
        raise fail_validation(("body", "plan_patch"), "a step id is given twice")
    frozen = sorted(set(patch) & (set(ids) - again))
    if frozen:
        raise fail_validation(
            ("body", "plan_patch"),
            f"steps {', '.join(frozen)} are taken over, not run again, so they cannot change",
        )
    try:
        plan = Plan(steps=[patch.pop(s.id, s) for s in inp.plan.steps] + list(patch.values()))
    except ValidationError as exc:  # too many steps
        raise fail_validation(("body", "plan_patch"), exc.errors()[0]["msg"]) from None
    mcp_tools = await mcp_tools_for(plan_tools(plan), hub, policy)  # as the servers are now
    tools = toolbox(mcp_tools)
    errors = validate_plan(plan, tools, policy)
    if errors:  # located in the patched plan, whose steps are the run's and the patch's
        where = [f"{'.'.join(str(p) for p in e.loc[2:])}: {e.msg}" for e in errors]
        raise fail_validation(("body", "plan_patch"), "the patched plan: " + "; ".join(where))
    done = await _done_steps(settings, run_id, desc, handle, ids)
    kept = {k: v for k, v in done.items() if k not in again}
    runs = {s.id for s in plan.steps} - set(kept)
    forked = inp.model_copy(update={"plan": plan, "mcp_tools": mcp_tools})
    if body.model is not None:
        forked = _plan_on_model(forked, body.model, runs)
    forked = under_policy_in_force(forked, runs, policy, caller)
    undo = _calls_to_undo(inp.plan, again, done, run_id) if body.compensate else []
    replay = await _recorded(client, run_id, inp) if body.replay_tools else None
    return await _start_again(
        client, settings, run_id, forked, kept, caller, "fork_of", undo, replay
    )


async def _recorded(client: Client, run_id: str, inp: RunInput) -> list[RecordedCall]:
    """The tool calls a counterfactual fork of the run answers from: those the run made
    (and those it answered so itself, if it is one), up to REPLAY_MAX_BYTES of them."""
    calls = [*(inp.reuse.tools if inp.reuse else []), *await recorded_calls(client, run_id)]
    kept, size = [], 0
    for call in calls:
        size += len(call.model_dump_json())
        if size > REPLAY_MAX_BYTES:  # the rest run again: the run's input stays small
            break
        kept.append(call)
    return kept


def _on_models(
    inp: RunInput, agent: AgentSpec, model: str | None, models: RoleModels | None
) -> RunInput:
    """Goal-only run `inp` with its roles' models as `model` and `models` say."""
    if model is None and models is None:
        return inp
    roles = models or RoleModels()
    changed = agent.model_copy(
        update={
            "planner_model": roles.planner or model or agent.planner_model,
            "actor_model": roles.actor or model or agent.actor_model,
            "judge_model": roles.judge or model or agent.judge_model,
        }
    )
    config = inp.config.model_copy(update={"default_model": model or inp.config.default_model})
    return inp.model_copy(update={"agent": changed, "config": config})


def _plan_on_model(inp: RunInput, model: str, again: set[str]) -> RunInput:
    """Plan run `inp` with `model` as its default and the model of its model steps that
    run again."""
    assert inp.plan is not None
    steps = [
        s.model_copy(update={"model": s.model.model_copy(update={"model": model})})
        if s.model is not None and s.id in again
        else s
        for s in inp.plan.steps
    ]
    config = inp.config.model_copy(update={"default_model": model})
    return inp.model_copy(update={"plan": Plan(steps=steps), "config": config})


def _calls_to_undo(
    plan: Plan, again: set[str], done: dict[str, StepState], run_id: str
) -> list[CompletedCall]:
    """The tool calls of `run_id` in steps that run again and that it completed, oldest
    first, as its undo log would hold them (their undo worked out when it runs)."""
    calls = []
    for step in plan.steps:
        state = done.get(step.id)
        if step.tool is None or step.id not in again or state is None:
            continue
        if state.status != "completed" or not isinstance(state.output, dict):
            continue
        try:
            args = resolve(step.args, lambda ref: done[ref].output)
        except (ReferenceError_, KeyError):  # an input it no longer has: nothing to undo by
            continue
        calls.append(
            CompletedCall(
                step_id=step.id, tool=step.tool, args=args, output=state.output, run_id=run_id
            )
        )
    return calls


async def _ended_run(
    client: Client, caller: Principal, run_id: str, statuses: Collection[str], which: str
) -> tuple[WorkflowHandle[Any, Any], WorkflowExecutionDescription, RunInput]:
    """The run to start again, which `caller` may start again, its description and input:
    409 unless its status is one of `statuses` (`which` in words)."""
    handle, desc = await access.run_for(client, caller, "start_again", run_id)
    status = run_status_of(desc)
    if status not in statuses:
        raise HTTPException(409, f"run '{run_id}' is {status}: only {which}")
    return handle, desc, await _input_of(client, handle)


async def _final_state(
    settings: Settings,
    run_id: str,
    desc: WorkflowExecutionDescription,
    handle: WorkflowHandle[Any, Any],
) -> RunState:
    """The ended run's status: from its final record, or its query."""
    recorded = await stored_part(settings, run_id, desc, "status")
    if recorded is not None:
        return RunState.model_validate(recorded)
    state: RunState = await query_run(handle, wire.STATUS, RunState)
    return state


def _agent_carry(
    state: RunState, spec: AgentSpec, from_step: str | None, guidance: str | None
) -> AgentCarry | None:
    """Where a goal-only run's agent goes on: its plan as the ended run left it, the steps
    before `from_step` (or before the first that did not complete) done, the rest to do
    afresh, `guidance` at the first of them. None if it never made a plan (it plans again)."""
    plan = state.plan
    ids = [item.id for item in plan]
    if from_step is None:
        index = next((i for i, item in enumerate(plan) if item.status != "completed"), len(plan))
    elif from_step in ids:
        index = ids.index(from_step)
    else:
        known = ", ".join(ids) or "none: it made no plan"
        raise fail_validation(
            ("body", "from_step"), f"the run's agent plan has no step '{from_step}' ({known})"
        )
    unfinished = [item.id for item in plan[:index] if item.status != "completed"]
    if unfinished:
        raise fail_validation(
            ("body", "from_step"),
            f"steps before it did not complete ({', '.join(unfinished)}): go on from the first",
        )
    if not plan:
        return None
    again = [
        PlanItem(id=item.id, intent=item.intent, expected_evidence=item.expected_evidence)
        for item in plan[index:]
    ]
    if guidance is not None and again:
        again[0].guidance.append(guidance)
    acceptance = [CriterionState.pending(c) for c in spec.acceptance]
    notes = [f"{item.id}: {item.summary}" for item in plan[:index] if item.summary]
    return AgentCarry(
        plan=[*plan[:index], *again], index=index, acceptance=acceptance, progress=notes
    )


async def _input_of(client: Client, handle: WorkflowHandle[Any, Any]) -> RunInput:
    """The input the run's latest history segment started with: its plan and config."""
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            [inp] = await client.data_converter.decode(payloads, [RunInput])
            if isinstance(inp, RunInput):
                return inp
        break
    raise HTTPException(409, f"run '{handle.id}' has no input longrun can read")


async def _done_steps(
    settings: Settings,
    run_id: str,
    desc: WorkflowExecutionDescription,
    handle: WorkflowHandle[Any, Any],
    step_ids: list[str],
) -> dict[str, StepState]:
    """The steps the run completed or skipped, whole: from its final record, or (a run that
    stored none) each from the `step` query."""
    recorded = await stored_part(settings, run_id, desc, "steps")
    if recorded is not None:
        states = [StepState.model_validate(recorded[i]) for i in step_ids if i in recorded]
    else:
        states = []
        for step_id in step_ids:
            state = await query_run(handle, wire.STEP, StepState, StepQuery(step_id=step_id))
            if state is not None:
                states.append(state)
    return {s.id: s for s in states if s.status in DONE}


def _with_dependents(plan: Plan, step_id: str) -> set[str]:
    """`step_id` and every step that depends on it, directly or not."""
    found = {step_id}
    for step in plan.steps:  # a valid plan lists a step after those it depends on
        if found & set(step.depends_on or []):
            found.add(step.id)
    return found


def _copy_artifacts(settings: Settings, source: str, target: str, outputs: list[Any]) -> None:
    """Copy into the new run the stored values the taken-over outputs refer to (blocking:
    store reads and writes): a reference names an artifact of the run it is in."""
    names = set(_ref_names(outputs))
    names |= {m.group(1) for m in refs.MARKER.finditer(json.dumps(outputs))}
    store = store_for(settings)
    for name in sorted(names):
        store.put(target, store.get(source, name))


def _ref_names(value: Any) -> list[str]:
    if refs.is_ref(value):
        return [value["artifact"]]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _ref_names(v)]
    if isinstance(value, list):
        return [n for v in value for n in _ref_names(v)]
    return []
