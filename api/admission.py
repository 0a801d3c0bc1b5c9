"""Admission: a run's workflow input built from a request and checked (its plan, tools,
budget, webhooks, secrets), and the start every run shares. Runs, retries, forks and
schedules all come through here."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
from fastapi import HTTPException
from temporalio.client import Client
from temporalio.common import (
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)

from activities.mcp import McpHub
from api import access
from api.auth import Principal
from api.mcp_tools import request_mcp_tools
from api.reading import invalid
from longrun import grants, secrets, wire
from longrun.attributes import (
    start_attributes,
    start_memo,
)
from longrun.catalogue import toolbox
from longrun.contracts import (
    AgentSpec,
    RoleModels,
    RunConfig,
    RunInput,
    RunRequest,
    ToolCheck,
)
from longrun.destinations import early_refusal, port_of
from longrun.plans import (
    PlanError,
    acceptance_of,
    check_limits,
    child_run_errors,
    effective_budget,
    normalize_plan,
    validate_agent,
    validate_plan,
)
from longrun.policy import Policy
from longrun.settings import Settings

IDEMPOTENCY_NAMESPACE = uuid.UUID("6c0f8a3e-4a51-4d0c-9a8e-2f1b7f3d5e11")


def request_digest(body: RunRequest) -> str:
    return hashlib.sha256(body.model_dump_json().encode()).hexdigest()


def secrets_named(body: RunRequest) -> list[str]:
    """Every secret the request's steps and checks name."""
    args = [step.args for step in body.plan.steps] if body.plan is not None else []
    args += [c.check.args for c in body.acceptance or [] if isinstance(c.check, ToolCheck)]
    return secrets.named(args)


def _webhook_problems(body: RunRequest, settings: Settings) -> list[PlanError]:
    """Why the run's webhooks cannot be delivered: a URL runs may not reach, or no secret
    to sign with."""
    errors = []
    for i, url in enumerate(body.webhooks or []):
        try:
            parsed = httpx.URL(url)
            port = port_of(parsed.scheme, parsed.port)
            refusal = early_refusal(settings.allowed_destinations(), parsed.host, port)
        except httpx.InvalidURL as exc:
            refusal = f"not a URL: {exc}"
        if refusal is not None:
            errors.append(PlanError(loc=("body", "webhooks", i), msg=refusal))
    if body.webhooks and settings.webhook_secret is None:
        errors.append(
            PlanError(
                loc=("body", "webhooks"),
                msg="this server has no LONGRUN_WEBHOOK_SECRET to sign webhooks with",
            )
        )
    return errors


async def run_input(
    body: RunRequest, settings: Settings, policy: Policy, hub: McpHub, caller: Principal
) -> RunInput:
    """The workflow input for a request by `caller`, or 422 with every problem found (503
    when an MCP server it names cannot list its tools), 403 when it names secrets the
    caller's key is not granted (a courtesy: the activity that would reveal one checks)."""
    mcp_tools = await request_mcp_tools(body, hub, policy)
    tools = toolbox(mcp_tools)
    errors = validate_agent(body, tools, policy)
    if body.plan is not None:
        errors = validate_plan(body.plan, tools, policy) + errors
    if body.budget is not None:
        errors += check_limits(body.budget, settings.budget_ceilings, ("body", "budget"))
    errors += _webhook_problems(body, settings)
    if body.plan is not None and not errors:
        errors += child_run_errors(body.plan, settings.max_child_runs)
    if errors:
        raise invalid(errors)
    caller.check_granted(secrets_named(body))
    model = body.model or settings.model
    config = RunConfig(
        default_model=model,
        prices=settings.prices,
        policy=policy,
        continue_as_new_every=settings.continue_as_new_every,
        prompt_token_budget=settings.prompt_token_budget,
        model_retry_window_s=settings.model_retry_window_s,
        webhooks=list(dict.fromkeys([*settings.webhooks, *(body.webhooks or [])])),
        approval_timeout_s=settings.approval_timeout_s,
        on_timeout=settings.approval_on_timeout,
        escalate_to=settings.approval_escalate_to,
        max_child_runs=settings.max_child_runs,
    )
    budget = effective_budget(body.budget, settings.budget_defaults, settings.budget_ceilings)
    common = {
        "run_id": "",
        "goal": body.goal,
        "labels": body.labels,
        "config": config,
        "on_failure": body.on_failure,
        "mcp_tools": mcp_tools,
    }
    if body.plan is not None:
        plan = normalize_plan(body.plan, tools, policy)
        return RunInput(**common, plan=plan, budget=budget)
    roles = body.models or RoleModels()
    agent = AgentSpec(
        acceptance=acceptance_of(body),
        tools=list(
            dict.fromkeys(body.tools if body.tools is not None else filter(policy.allows, tools))
        ),
        planner_model=roles.planner or model,
        actor_model=roles.actor or model,
        judge_model=roles.judge or model,
        max_steps=body.max_steps or settings.max_steps,
        strategy=body.strategy or settings.agent_strategy,
        **({"watchdog": body.watchdog} if body.watchdog is not None else {}),
    )
    return RunInput(**common, agent=agent, budget=budget)


def run_details(inp: RunInput) -> str:
    """Static details for the Web UI: what the run was asked to do."""
    if inp.plan is not None:
        ids = [s.id for s in inp.plan.steps]
        more = f" and {len(ids) - 20} more" if len(ids) > 20 else ""
        return f"{len(ids)} steps: {', '.join(ids[:20])}{more}"
    assert inp.agent is not None
    criteria = ", ".join(c.id for c in inp.agent.acceptance)
    return f"goal-only run; acceptance: {criteria}; tools: {', '.join(inp.agent.tools)}"


def run_search_attributes(inp: RunInput) -> TypedSearchAttributes:
    """What a run is found by from its start: its status (running), its labels, the run
    it retries or forks, and the progress its first publish would show (a plan: acting,
    none of its steps done; a goal-only run: planning, none planned)."""
    progress = ("acting", len(inp.plan.steps)) if inp.plan is not None else ("planning", 0)
    return start_attributes(
        inp.labels, inp.reuse.run_id if inp.reuse else None, inp.tenant, progress
    )


def run_memo(
    inp: RunInput, changes: Sequence[str] = wire.STARTED_WITH, **more: Any
) -> dict[str, Any]:
    """What a run's memo holds from its start: its goal, labels and owner (and `more`), and
    the changes it starts with (longrun.wire.STARTED_WITH, unless told others)."""
    started_with = {wire.STARTED_WITH_MEMO: list(changes)}
    return start_memo(inp.goal, inp.labels, inp.owner, inp.tenant, **more, **started_with)


def fresh_id(prefix: str, namespace: uuid.UUID, caller: str, key: str | None) -> str:
    """A new id, or (with an `Idempotency-Key`) the one this caller's key always names:
    scoped to the caller, so two clients using the same key get two."""
    if key is None:
        return f"{prefix}-{uuid.uuid4().hex}"
    scoped = f"{caller}\n{key}"
    return f"{prefix}-{uuid.uuid5(namespace, scoped).hex}"


async def start_run(
    client: Client,
    settings: Settings,
    inp: RunInput,
    changes: Sequence[str] = wire.STARTED_WITH,
    **memo: Any,
) -> None:
    """Start the run `inp` (its run id set) as the API starts every run: its status and
    labels searchable, its goal, labels and owner in its memo (with `memo`), with today's
    changes (or `changes`)."""
    kept = run_memo(inp, changes, **memo)
    await client.start_workflow(
        wire.RUN_WORKFLOW,
        inp,
        id=inp.run_id,
        task_queue=settings.task_queue,
        id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
        search_attributes=run_search_attributes(inp),
        memo=kept,
        static_summary=inp.goal,
        static_details=run_details(inp),
    )
    access.remember(inp.run_id, kept)


def under_policy(
    inp: RunInput, again: set[str] | None, policy: Policy
) -> tuple[RunInput, list[str]]:
    """`inp` under `policy` rather than the one it was started with (its approvals worked
    out again), and what `policy` refuses among the steps that would run (`again`, their
    ids; None: all) or the agent's tools."""
    tools = toolbox(inp.mcp_tools)
    update: dict[str, Any] = {"config": inp.config.model_copy(update={"policy": policy})}
    refused: list[str] = []
    if inp.plan is not None:
        ids = [s.id for s in inp.plan.steps]
        for error in validate_plan(inp.plan, tools, policy):
            at = error.loc[3] if len(error.loc) > 3 and isinstance(error.loc[3], int) else None
            step = ids[at] if at is not None and at < len(ids) else None
            if again is None or step is None or step in again:
                refused.append(f"step {step}: {error.msg}" if step else error.msg)
        if not refused:
            update["plan"] = normalize_plan(inp.plan, tools, policy)
    if inp.agent is not None:
        refused += [f"tool {t}: not allowed" for t in inp.agent.tools if not policy.allows(t)]
    return inp.model_copy(update=update), refused


def under_policy_in_force(
    inp: RunInput, again: set[str] | None, policy: Policy, caller: Principal
) -> RunInput:
    """`inp`, to start again (a retry, a fork) for `caller`, under the policy in force rather
    than the one it was first started with: 403 naming what that policy refuses among the
    steps that run again (`again`, their ids; None: all) or the agent's tools, or the
    secrets they name that the caller's key is not granted."""
    admitted, refused = under_policy(inp, again, policy)
    if refused:
        raise HTTPException(
            403, "the policy in force refuses what this run would do: " + "; ".join(refused)
        )
    caller.check_granted(grants.named_in(inp, again))
    return admitted
