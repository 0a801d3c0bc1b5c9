"""The agent's turns on one step: the model acts, its tool calls run as the run's steps
(refused, gated, budgeted and recorded like any other), until it says the step is done."""

from __future__ import annotations

import json
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from workflows.agent import briefs
from workflows.agent.briefs import MAX_ARGUMENT_CHARS
from workflows.agent.checks import Checker
from workflows.agent.memory import Memory
from workflows.agent.state import AgentState
from workflows.agent.watchdog import DECIDER, ProgressWatch, StallGate, call_key
from workflows.changes import baseline_retired, changed
from workflows.common import StepFailed, cut, failure_of, preview
from workflows.parts import RunParts

with workflow.unsafe.imports_passed_through():
    # Safe to pass through: a method reference, pure prompt text and pydantic models.
    from activities.model import ModelActivities
    from longrun import context, plans, prompts, secrets
    from longrun.contracts import (
        DELEGATE,
        ActRequest,
        ActResult,
        AgentSpec,
        Brief,
        Criterion,
        Delegation,
        JudgeCheck,
        PlanItem,
        RunSpec,
        ToolCallRequest,
    )

TOOL_RESULT_CHARS = 32_000  # of a tool result in history (its big fields are references)
# Of one step's turns as `model.act` gets them: a turn of many big tool results keeps the
# call's input well under Temporal's 2 MB payload limit.
TURNS_MAX_BYTES = 256 * 1024
OBSERVATION_CHARS = 1500
REJECTED_KEPT = 20  # rejected calls remembered, the latest
# What a restart can help: the model going round in circles, not a phase out of time.
RESTARTABLE = ("repeated_call", "repeated_output", "invalid_answers", "no_progress")


class Actor:
    """Works on one plan step at a time through `model.act` and the allowed tools."""

    def __init__(
        self,
        parts: RunParts,
        spec: AgentSpec,
        state: AgentState,
        checker: Checker,
        memory: Memory,
    ) -> None:
        self._parts = parts
        self._spec = spec
        self._state = state
        self._checker = checker
        self._memory = memory
        # Only tools this worker has (the API may know newer ones).
        tools = [parts.tools[name] for name in spec.tools if name in parts.tools]
        self._offered = [briefs.tool_schema(t) for t in tools] + [prompts.FINISH_TOOL]
        # A child run nested as deep as runs go cannot delegate further.
        self._delegates = DELEGATE in spec.tools and parts.inp.depth < plans.MAX_CHILD_DEPTH
        if self._delegates:
            self._offered.append(prompts.DELEGATE_TOOL)
        # A model calls a tool by its function name (briefs.function_name).
        self._names = {briefs.function_name(t.name): t.name for t in tools}
        # The progress watchdog, for runs that have it (set by the loop).
        self.watch: ProgressWatch | None = None
        self._gate = StallGate(parts, spec.watchdog)
        self._changed = False  # a tool call changed something since the last check
        # The failures of the latest acceptance check, while no call has changed anything.
        self._unchanged_failures: str | None = None
        self.keeps_evidence = False  # the loop sets it for runs started with the change
        self.criteria_in_prose = False  # likewise

    async def act(self, item: PlanItem, feedback: str | None) -> bool:
        """Work on one step until the model says it is done; True if `finish` was proven."""
        state, inp = self._state, self._parts.inp
        state.enter("acting")
        if self.watch is not None:
            self.watch.new_step()
        # model.act puts the prompt together; history carries the brief and this step's
        # turns only.
        brief = self._brief(item, feedback)
        messages: list[dict[str, Any]] = []
        if not (self.keeps_evidence and state.observing == item.id):
            state.observations = []
        state.observing = item.id
        for _ in range(self._spec.max_turns_per_step):
            if state.turns >= self._spec.max_steps:
                raise StepFailed(
                    f"max_steps ({self._spec.max_steps}) used up before the goal was verifiably met"
                )
            if self.watch is not None:
                self.watch.note_turn()
            if await self.held(item) is not None:  # the step starts afresh, guided
                brief, messages = self._brief(item, feedback), []
            state.turns += 1
            result: ActResult = await self._parts.calls.checked(
                ModelActivities.act,
                ActRequest(
                    run_id=inp.run_id,
                    step_id=item.id,
                    model=self._spec.actor_model,
                    messages=messages,
                    tools=self._offered,
                    brief=brief,
                    time_left_s=self._parts.ledger.time_budget_left(),
                ),
                summary=f"act: {item.id} (turn {state.turns})",
            )
            self._parts.ledger.count(result.usage)
            messages.append(briefs.assistant_message(result))
            if not result.tool_calls:
                item.summary = (result.content or "").strip()[:1000] or "(no summary)"
                return False
            for call in result.tool_calls:
                if call.name == "finish":
                    item.summary = briefs.finish_summary(call)
                    if self._unchanged_failures and changed("unchanged-claims-not-rechecked"):
                        state.premature_completions += 1
                        reply = (
                            "Not finished: nothing has changed since these acceptance "
                            "criteria failed; change what they check first:\n"
                            f"{self._unchanged_failures}"
                        )
                    else:
                        failures = await self._checker.acceptance()
                        if not failures:
                            return True
                        state.premature_completions += 1
                        self._unchanged_failures = failures
                        self._parts.events.emit("acceptance.failed", item.id, failures=failures)
                        state.enter("acting")
                        reply = f"Not finished: these acceptance criteria fail:\n{failures}"
                else:
                    reply = await self._call_tool(item, call)
                    failing = await self._checked_early()
                    if failing == "":
                        item.summary = f"every acceptance criterion passes after {call.name}"
                        return True
                    if failing is not None:  # what is still missing, said at once
                        reply += f"\n\nAcceptance criteria still failing:\n{failing}"
                messages.append({"role": "tool", "tool_call_id": call.id, "content": reply})
                if await self.held(item) is not None:  # the rest of the answer is dropped
                    brief, messages = self._brief(item, feedback), []
                    break
            context.bounded_turns(messages, TURNS_MAX_BYTES)
        item.summary = f"stopped after {self._spec.max_turns_per_step} turns without a summary"
        return False

    async def _checked_early(self) -> str | None:
        """After a tool call that changed something, the acceptance criteria that fail
        ("" when all pass), for runs whose criteria cost no model call to check; None
        when they were not checked."""
        changed, self._changed = self._changed, False
        checker = self._checker
        if not (changed and checker.done_when_done and checker.checks_cheaply):
            return None
        failures = await checker.acceptance()
        self._state.enter("acting")
        self._unchanged_failures = failures or None
        return failures

    async def held(self, item: PlanItem | None) -> str | None:
        """If the watchdog saw the run stall, start the step afresh when it may, or else
        hold the run for a person: the guidance to go on with (a rejection fails the run);
        None if it did not stall."""
        if self.watch is None or self.watch.stall is None:
            return None
        stall = self.watch.stall
        if item is not None and self._restarts(item, stall.evidence.get("kind")):
            item.restarts += 1
            p = self._parts
            p.audit.record(DECIDER, "restarted", f"{item.id}: {stall.why}", event=False)
            p.events.emit("step.restarted", item.id, detail=stall.why, restarts=item.restarts)
            guidance = (
                f"{DECIDER}: an earlier try at this step went nowhere ({cut(stall.why, 300)}) "
                "and was set aside; do it another way"
            )
            item.guidance.append(guidance)
        else:
            guidance = await self._gate.hold(stall, item)
        self.watch.forgive()
        return guidance

    def _restarts(self, item: PlanItem, kind: object) -> bool:
        """Whether a stall of `kind` on `item` starts the step afresh instead of holding."""
        if kind not in RESTARTABLE or item.restarts >= self._spec.watchdog.restarts:
            return False
        return changed("stalled-steps-restart")

    def _brief(self, item: PlanItem, feedback: str | None) -> Brief:
        inp = self._parts.inp
        return briefs.brief(
            inp.goal,
            self._spec.acceptance,
            self._state.plan,
            self._state.summary,
            self._state.notes,
            item,
            feedback,
            inp.config.prompt_token_budget,
            prose=self.criteria_in_prose,
        )

    def _invalid(self, reply: str) -> str:
        """An answer that called no allowed tool rightly: the watchdog counts it (and may
        coach the model, with this reply)."""
        if self.watch is not None:
            self.watch.note_invalid(reply)
            if self.watch.coaching is not None:
                reply, self.watch.coaching = f"{reply}\n\n{self.watch.coaching}", None
        return reply

    async def _call_tool(self, item: PlanItem, call: ToolCallRequest) -> str:
        """Run one tool call the model asked for; the answer is what the model is told."""
        p = self._parts
        name = self._names.get(call.name, call.name)
        self._state.tool_calls += 1
        step_id = f"{item.id}-t{self._state.tool_calls}"
        policy = p.inp.config.policy
        if name not in self._spec.tools or not policy.allows(name):
            state = p.steps.add(step_id, "tool")
            refusal = (
                f"refused: '{name}' is not in this run's tools"
                if policy.allows(name)
                else f"refused: '{name}' is forbidden by the server's policy"
            )
            p.steps.settle(state, "skipped", error=refusal)
            p.audit.record("longrun", "refused", f"{step_id}: {refusal}")
            allowed = ", ".join(self._spec.tools) or "(none)"
            return self._invalid(
                f"Refused ({refusal}): the tool is not allowed in this run, so nothing ran. "
                f"Allowed tools: {allowed}."
            )
        if name == DELEGATE:
            return await self._delegate(call, step_id)
        spec = p.tools.get(name)
        if spec is None:  # the API knew the tool; this worker does not
            state = p.steps.add(step_id, "tool")
            refusal = f"no tool '{name}' on this worker: run workers of the API's version"
            p.steps.settle(state, "failed", error=refusal)
            return self._invalid(f"The tool failed: {refusal}. Use another tool.")
        try:
            if len(call.arguments) > MAX_ARGUMENT_CHARS:
                raise ValueError(f"longer than {MAX_ARGUMENT_CHARS} characters")
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("not an object")
            if secrets.named(args):
                raise ValueError("secrets are for plan steps written by people, not for agents")
            problems = spec.args_errors(args)
            if problems:
                raise ValueError(
                    "; ".join(
                        f"{'.'.join(map(str, at)) or '(args)'}: {msg}" for at, msg in problems
                    )
                )
        except (ValueError, RecursionError) as exc:
            example = json.dumps(briefs.example_arguments(spec.parameters()))
            return self._invalid(
                f"Invalid arguments for {name}, nothing ran: {str(exc)[:2000]}. "
                f"Call {call.name} with arguments like {example}"
            )
        key = call_key(name, args)
        if key in self._state.rejected_calls and changed("rejected-calls-not-asked-again"):
            # A "no" binds to the exact call: asking again is approval fatigue.
            return self._invalid(
                f"A person already rejected this exact call ({name} {preview(args)}); it is "
                "not asked again and nothing ran. Do the goal another way, or say it cannot "
                "be done."
            )

        state = p.steps.add(step_id, "tool")
        baseline_retired()
        replayed = p.calls.counterfactual.has(name, args)  # nothing runs: nothing to approve or pay
        if (
            not replayed
            and policy.needs_approval(name, args, spec.side_effect_for(args))
            and await p.standing.covering(step_id, name, args) is None
        ):
            why = policy.binding_approval(name, args)
            ask = p.approvals.ask(
                step_id,
                f"agent step '{item.id}' wants to run {name} {preview(args)}"
                + (f" ({why})" if why else ""),
                arguments={"tool": name, "args": args},
                tool=name,
            )
            config = p.inp.config
            record = await p.approvals.decision(
                ask, config.approval_timeout_s, config.on_timeout, config.escalate_to
            )
            if record.decision == "reject":
                self._state.rejected += 1
                self._state.rejected_calls = [*self._state.rejected_calls, key][-REJECTED_KEPT:]
                p.steps.settle(state, "skipped", error=f"rejected by {record.decided_by}")
                comment = f": {record.comment}" if record.comment else ""
                return self._ran(
                    name, args, f"A person rejected this call{comment}. Find another way."
                )
        if not replayed:
            await p.ledger.checkpoint("tool")
        p.steps.start(state)
        try:
            result = await p.calls.tool(step_id, name, args)
        except ActivityError as exc:
            message, attempts = failure_of(exc)
            state.attempts = attempts
            p.steps.settle(state, "failed", error=message)
            self._state.observe(f"{name} {preview(args)} failed: {message}")
            return self._ran(name, args, f"The tool failed: {message}")
        state.attempts = result.attempt
        if not result.replayed:
            p.undo.remember(step_id, name, args, result.output)
        p.steps.settle(state, "completed", output=result.output)
        if spec.side_effect_for(args) != "read_only":
            self._state.effects += 1
            self._changed = True
            self._unchanged_failures = None
        text = json.dumps(result.output)
        self._state.observe(f"{name} {preview(args)} -> {text[:OBSERVATION_CHARS]}")
        # Big fields are artifact references here; model.act reads them back in, within
        # its own limit, so history keeps only the references.
        return self._ran(
            name, args, text if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + "…"
        )

    def _ran(self, name: str, args: dict[str, Any], reply: str) -> str:
        """A tool call ran and the model is told `reply`: the watchdog counts it."""
        if self.watch is not None:
            self.watch.note_call(name, args, reply)
            if self.watch.coaching is not None:
                reply, self.watch.coaching = f"{reply}\n\n{self.watch.coaching}", None
        return reply

    async def _delegate(self, call: ToolCallRequest, step_id: str) -> str:
        """Run a sub-goal as a child run (its budget carved out of this run's, its tools
        this run's); the answer is its result, or why it failed."""
        p = self._parts
        if not self._delegates:
            return "Refused: delegated runs cannot nest deeper here; do the work yourself."
        try:
            if len(call.arguments) > MAX_ARGUMENT_CHARS:
                raise ValueError(f"longer than {MAX_ARGUMENT_CHARS} characters")
            asked = Delegation.model_validate_json(call.arguments or "{}")
        except ValueError as exc:
            return f"Invalid arguments for delegate, nothing ran: {str(exc)[:2000]}"
        criteria = [
            Criterion(id=f"c{i}", check=JudgeCheck(judge=text))
            for i, text in enumerate(asked.acceptance, 1)
        ]
        spec = RunSpec(goal=asked.goal, acceptance=criteria or None, tools=self._spec.tools)
        state = p.steps.add(step_id, "run")
        p.steps.start(state)
        try:
            output = await p.children.run(step_id, spec)
        except StepFailed as exc:
            p.steps.settle(state, "failed", error=str(exc))
            self._state.observe(f"delegate {preview(asked.goal)} failed: {exc}")
            return f"The delegated run failed: {exc}"
        p.steps.settle(state, "completed", output=output)
        text = json.dumps(output)
        self._state.observe(f"delegate {preview(asked.goal)} -> {text[:OBSERVATION_CHARS]}")
        return text if len(text) <= TOOL_RESULT_CHARS else text[:TOOL_RESULT_CHARS] + "…"
