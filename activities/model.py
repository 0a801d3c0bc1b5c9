"""The model activities: `model.complete`, `model.plan`, `model.act`, `context.compact` and
the judge that `verify.*` use, each one Chat Completions call through activities/endpoint.

The client never retries on its own (`max_retries=0`): Temporal owns retries, so each
attempt is visible in history and bounded by the step's retry policy.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities import repair, routed_calls, structured
from activities.endpoint import WINDOW_MARGIN_TOKENS, ContextExceeded, Endpoint, Refused
from activities.errors import fatal, recovering_s, reported_with_attempt
from activities.memory import Journal
from longrun import context, prompts, recording
from longrun.artifacts import store_for
from longrun.contracts import (
    ActRequest,
    ActResult,
    AgentPlan,
    CompactRequest,
    CompactResult,
    ModelRequest,
    ModelResult,
    ModelUsage,
    PlanAttempt,
    PlanRequest,
    ToolCallRequest,
    Verdict,
)
from longrun.settings import Settings

# The results of model activities, which say where their recorded calls are.
Recordable = TypeVar("Recordable", ModelResult, PlanAttempt, ActResult, CompactResult, Verdict)
TOOL_RESULT_CHARS = 16_000  # of one tool result, as the actor reads it
RECALL_NOTES = 5  # journal notes offered to the actor per call
# What one plan step takes to write (id, intent, expected evidence), and the rest of a
# plan's JSON: a plan's `max_tokens` follows from the steps it may have.
PLAN_STEP_TOKENS = 120
PLAN_TOKENS = 200
# A plan's `max_tokens` makes room for the steps the model writes in PLAN_WRITE_S at its
# known pace, and for PLAN_STEPS_SIZED steps at least (or before its pace is known): a small
# model in JSON mode may write whitespace until the limit (5,000 tokens, three minutes on a
# CPU server, for 40 steps). A longer plan is cut and asked again for fewer steps; a fast
# server writes a plan of hundreds of steps in one call.
PLAN_STEPS_SIZED = 16
PLAN_WRITE_S = 60.0
# Answers in a row that no repair made a plan, after which `auto` runs of that model go
# direct on this worker without asking (a run's planning gives up after as many).
BAD_PLANS = 3
# A goal of one sentence this short is one step: `auto` runs act on it without a plan (a
# small model's plan for it restates the goal, or reads the file it is asked to write).
SMALL_GOAL_CHARS = 240
_SENTENCE_END = re.compile(r"[.!?](?:\s+(?=[A-Z])|\s*$)")
# The share of its activity's timeout a model call plans to use: the rest is for reading
# the prompt slower than expected.
CALL_SHARE = 0.8


class ModelActivities:
    """Model calls, bound to one OpenAI-compatible endpoint from settings."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self.endpoint = Endpoint(settings)
        self._store = store_for(settings)
        self._journal = Journal.of(settings)
        self._bad_plans: dict[str, int] = {}  # model -> answers in a row that were no plan

    async def recorded(self, run_id: str, work: Awaitable[Recordable]) -> Recordable:
        """Do a model activity's `work`; with LONGRUN_RECORD_MODEL_CALLS its calls are kept
        as an artifact of the run, named in the result (for `longrun cassette`). The result
        says how long the call waited on recovery (see ModelUsage.recovering_s)."""
        with recording.collecting(self._settings.record_model_calls) as calls:
            result = await work
        result.recorded = await recording.kept(self._store, run_id, calls)
        if isinstance(result, ModelResult):
            result.recovering_s = recovering_s()
        elif result.usage is not None:
            result.usage.recovering_s = recovering_s()
        return result

    async def aclose(self) -> None:
        """Close the HTTP connections of the client, if one was made."""
        await self.endpoint.aclose()

    @activity.defn(name="model.complete")
    async def complete(self, req: ModelRequest) -> ModelResult:
        """Ask the model once; transient provider failures are raised for Temporal to retry.
        An answer that is not the JSON asked for comes back with `json_error`, which the
        workflow quotes when it asks again."""
        return await self.recorded(req.run_id, self._complete(req))

    async def _complete(self, req: ModelRequest) -> ModelResult:
        with reported_with_attempt() as attempt:
            # Artifact reads are file I/O: off the event loop, like the tools'.
            prompt, system = await asyncio.to_thread(
                self._store.expand, req.run_id, [req.prompt, req.system]
            )
            messages: list[dict[str, Any]] = []
            if system:
                messages.append({"role": "system", "content": system})
            messages.append({"role": "user", "content": prompt})
            if req.previous_error:
                messages.append({"role": "user", "content": prompts.reask(req.previous_error)})
            max_tokens = req.max_tokens or self._settings.max_output_tokens.complete
            json_value: Any = None
            json_error: str | None = None
            if req.json_schema is None:
                answer = await self.endpoint.chat(
                    req.model, messages, max_tokens=max_tokens, within_s=allowance(None)
                )
                text = answer.content or ""
            else:
                text, answer = await self.endpoint.structured(
                    req.model,
                    messages,
                    name="output",
                    schema=req.json_schema,
                    max_tokens=max_tokens,
                    within_s=allowance(None),
                )
                try:
                    json_value = structured.parse_json(text)
                    json_error = structured.problems(json_value, req.json_schema)
                except ValueError as exc:
                    json_error = str(exc)
                if json_error is not None:
                    json_value = None
            threshold = self._settings.artifact_threshold_bytes
            stored = await asyncio.to_thread(self._store.offload, req.run_id, text, threshold)
            return ModelResult(
                text=stored,
                json_value=json_value,
                json_error=json_error,
                model=answer.usage.model,
                input_tokens=answer.usage.input_tokens,
                output_tokens=answer.usage.output_tokens,
                attempt=attempt,
            )

    @activity.defn(name="model.plan")
    async def plan(self, req: PlanRequest) -> PlanAttempt:
        """Ask the planner for a plan; an invalid answer is returned, not raised, so the
        workflow can re-ask with the reason (and count the tokens it cost)."""
        return await self.recorded(req.run_id, self._plan(req))

    async def _plan(self, req: PlanRequest) -> PlanAttempt:
        with reported_with_attempt() as attempt:
            bad = self._bad_plans.get(req.model, 0)
            if req.strategy == "auto" and bad >= BAD_PLANS:
                why = f"model '{req.model}' gave no valid plan in its last {bad} answers here"
                return PlanAttempt(direct=True, error=why, usage=ModelUsage(model=req.model))
            if req.strategy == "auto" and req.context is None and small(req.goal):
                why = "the goal is one short sentence: one step"
                return PlanAttempt(direct=True, error=why, usage=ModelUsage(model=req.model))
            wanted = self._settings.max_output_tokens.plan
            sized = self._plan_steps_sized(req.model)
            if req.max_steps is not None:
                wanted = min(wanted, PLAN_TOKENS + PLAN_STEP_TOKENS * min(req.max_steps, sized))
            text, answer = await self.endpoint.structured(
                req.model,
                [
                    {"role": "system", "content": prompts.PLANNER},
                    {"role": "user", "content": prompts.plan_request(req)},
                ],
                name="plan",
                schema=PLAN_SCHEMA,
                max_tokens=wanted,
                within_s=allowance(req.time_left_s),
            )
            usage = answer.usage
            try:
                value, repairs = repair.repaired(structured.parse_json(text))
                plan = AgentPlan.model_validate(value)
            except ValueError as exc:  # pydantic's ValidationError is a ValueError
                if answer.finish_reason == "length":  # ask again for less, not again whole
                    capped = req.max_steps is not None and req.max_steps > sized
                    if capped and self._plan_steps_sized(req.model) > sized:
                        # Cut by the room made before the model's pace was known, which
                        # this call showed: the next has room for more steps.
                        error = _cut_before_pace(usage.output_tokens)
                    else:
                        error = _cut_short(text, usage.output_tokens, req)
                    return PlanAttempt(error=error, usage=usage, attempt=attempt)
                self._bad_plans[req.model] = self._bad_plans.get(req.model, 0) + 1
                return PlanAttempt(error=_explain(exc, text), usage=usage, attempt=attempt)
            self._bad_plans[req.model] = 0
            return PlanAttempt(plan=plan, repairs=repairs, usage=usage, attempt=attempt)

    def _plan_steps_sized(self, model: str) -> int:
        """How many steps a plan's `max_tokens` makes room for on this model."""
        pace = self.endpoint.paces.get(model)
        if pace is None:
            return PLAN_STEPS_SIZED
        written = int(pace.write_tps * PLAN_WRITE_S) - PLAN_TOKENS
        return max(PLAN_STEPS_SIZED, written // PLAN_STEP_TOKENS)

    @activity.defn(name="model.act")
    async def act(self, req: ActRequest) -> ActResult:
        """One turn of the actor: it answers, calls tools, or both."""
        return await self.recorded(req.run_id, self._act(req))

    async def _act(self, req: ActRequest) -> ActResult:
        with reported_with_attempt() as attempt:
            wanted = self._settings.max_output_tokens.act
            # Tool schemas as grammar engines take them; arguments are checked in full
            # by the workflow before any tool runs.
            tools = [_simplified_tool(t) for t in req.tools]
            window = await self.endpoint.window(req.model)
            for _ in range(2):
                messages, trimmed = await asyncio.to_thread(self._prompt, req, window, wanted)
                try:
                    content, calls, usage = await self._turn(req, messages, tools, wanted)
                except ContextExceeded as exc:
                    # The server said how small its window is: assemble within it, once.
                    if exc.window is None or exc.window == window or req.brief is None:
                        raise fatal(str(exc), type="ModelRequestRejected") from None
                    window = exc.window
                    continue
                except Refused as exc:
                    raise fatal(str(exc), type="ModelRequestRejected") from None
                return ActResult(
                    content=content,
                    tool_calls=calls,
                    usage=usage,
                    attempt=attempt,
                    trimmed=trimmed,
                )
            raise fatal(
                f"model '{req.model}' at {self.endpoint.url}: the prompt does not fit its "
                f"context window of {window} tokens",
                type="ModelRequestRejected",
            )

    async def _turn(
        self,
        req: ActRequest,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        wanted: int,
    ) -> tuple[str | None, list[ToolCallRequest], ModelUsage]:
        """The actor's answer: with the tools offered as the server takes them ("auto"
        tool choice), or routed by longrun for a model that calls tools badly that way
        (an answer with a call that cannot be read is asked again routed; a model that
        gives several in a row is routed from then on). Calls written as text are read
        first, and go back into the conversation as native calls; one that lacks an
        argument is the run's to refuse, with arguments of the shape its tool asks for."""
        within = allowance(req.time_left_s)
        spent = ModelUsage(model=req.model)
        if not self.endpoint.routes(req.model):
            answer = await self.endpoint.call(
                req.model, messages, max_tokens=wanted, within_s=within, tools=tools
            )
            if answer.tool_calls:
                self.endpoint.read_well(req.model)
                return answer.content, routed_calls.named(answer.tool_calls, tools), answer.usage
            written = routed_calls.text_calls(answer.content or "", tools, len(messages))
            if written:
                self.endpoint.read_well(req.model)
                return None, routed_calls.named(written, tools), answer.usage
            why = routed_calls.calls_badly(answer.content, [], tools)
            if why is None or not self.endpoint.route(req.model, why):
                return answer.content, [], answer.usage
            spent = answer.usage
        text, answer = await self.endpoint.structured(
            req.model,
            routed_calls.routed_messages(messages, tools),
            name="action",
            schema=routed_calls.action_schema(tools),
            max_tokens=wanted,
            within_s=allowance(req.time_left_s),
        )
        try:
            value = structured.parse_json(text)
        except ValueError:
            return text, [], spent + answer.usage
        content, calls = routed_calls.routed_answer(value, len(messages))
        return content, routed_calls.named(calls, tools), spent + answer.usage

    def _prompt(
        self, req: ActRequest, window: int | None, answer_tokens: int
    ) -> tuple[list[dict[str, Any]], list[str]]:
        """The actor's messages: tool results read back in, and with a brief, the prompt
        assembled around the journal's relevant notes within the token budget (and within
        the context window, less room for the answer). Blocking file work: call it in a
        thread."""
        turns = [self._read_through(req.run_id, m) for m in req.messages]
        if req.brief is None:
            return turns, []
        brief = req.brief
        if window is not None:
            fits = max(1000, window - answer_tokens - WINDOW_MARGIN_TOKENS)
            brief = brief.model_copy(update={"token_budget": min(brief.token_budget, fits)})
        found = self._journal.search(req.run_id, brief.recall, RECALL_NOTES)
        notes = [f"[{n.kind}] {n.text}" for n in found]  # no step ids: models call them
        return context.assemble(brief, notes, turns, req.tools)

    @activity.defn(name="context.compact")
    async def compact(self, req: CompactRequest) -> CompactResult:
        """Fold the oldest progress entries into the rolling summary; the entries
        themselves stay in the journal."""
        return await self.recorded(req.run_id, self._compact(req))

    async def _compact(self, req: CompactRequest) -> CompactResult:
        with reported_with_attempt():
            answer = await self.endpoint.chat(
                req.model,
                [
                    {"role": "system", "content": prompts.COMPACTOR},
                    {"role": "user", "content": prompts.compact_request(req)},
                ],
                max_tokens=self._settings.max_output_tokens.compact,
                within_s=allowance(None),
            )
            usage = answer.usage
            summary = (answer.content or "").strip()
            if len(summary) > req.max_chars:  # keep the newest part: it is what comes next
                summary = "…" + summary[-(req.max_chars - 1) :]
            return CompactResult(summary=summary, usage=usage)

    def _read_through(self, run_id: str, message: dict[str, Any]) -> dict[str, Any]:
        """A tool result as the model should see it: stored outputs put back, then cut to
        TOOL_RESULT_CHARS. History keeps only the references."""
        if message.get("role") != "tool" or not isinstance(message.get("content"), str):
            return message
        try:
            result = json.loads(message["content"])
        except ValueError:
            return message
        text = json.dumps(self._store.expand(run_id, result))
        if len(text) > TOOL_RESULT_CHARS:
            text = text[:TOOL_RESULT_CHARS] + f"… [cut: {len(text)} characters in all]"
        return {**message, "content": text}

    async def judge(
        self,
        model: str,
        goal: str,
        statement: str,
        evidence: str,
        sources: Sequence[str] = (),
    ) -> Verdict:
        """Ask the judge whether `statement` holds, given `evidence`; it must cite a reason,
        and a pass must quote one of `sources` (what tools returned, files) when there are.
        The evidence is cut to what the model's context window holds, from its end (the
        workspace's files come last)."""
        answer_tokens = self._settings.max_output_tokens.judge
        for again in (False, True):  # again, once, if the server names a smaller window
            window = await self.endpoint.window(model)
            messages = [
                {"role": "system", "content": prompts.JUDGE},
                {"role": "user", "content": prompts.judge_request(goal, statement, "")},
            ]
            if window is not None:
                answer_room = min(answer_tokens, window // 4)
                room = Endpoint.left(window, messages) - answer_room - VERDICT_SCHEMA_TOKENS
                evidence = _cut_to(evidence, room)
            messages[1]["content"] = prompts.judge_request(goal, statement, evidence)
            try:
                text, said = await self.endpoint.structured(
                    model,
                    messages,
                    name="verdict",
                    schema=VERDICT_SCHEMA,
                    max_tokens=answer_tokens,
                    within_s=allowance(None),
                )
                break
            except ApplicationError:
                if again or await self.endpoint.window(model) in (None, window):
                    raise
        usage = said.usage
        try:
            answer = JudgeAnswer.model_validate(structured.parse_json(text))
        except ValueError as exc:
            # An unreadable verdict is a failed check (and its tokens still count).
            reason = f"the judge's answer was not a verdict: {_explain(exc, text)}"
            return Verdict(passed=False, evidence=reason, usage=usage)
        if answer.passed and not answer.reason.strip():
            return Verdict(
                passed=False, evidence="the judge confirmed without citing a reason", usage=usage
            )
        if answer.passed and not structured.quotes(answer.quote, sources):
            quoted = f"'{answer.quote[:200]}'" if answer.quote.strip() else "nothing"
            return Verdict(
                passed=False,
                evidence=f"the judge passed it quoting {quoted}, which no tool output or file "
                f"shows (its reason: {answer.reason[:500]})",
                usage=usage,
            )
        return Verdict(passed=answer.passed, evidence=answer.reason, usage=usage)


def allowance(time_left_s: float | None) -> float | None:
    """The seconds a model call may take: its share of what its activity attempt has
    left, and no more than the run has left of its time budget."""
    limits = [] if time_left_s is None else [time_left_s]
    info = activity.info()
    if info.start_to_close_timeout is not None:
        elapsed = (datetime.now(UTC) - info.started_time).total_seconds()
        limits.append(info.start_to_close_timeout.total_seconds() * CALL_SHARE - elapsed)
    return max(0.0, min(limits)) if limits else None


def _cut_short(text: str, tokens: int, req: PlanRequest) -> str:
    """Why a plan cut off at `tokens` (the most the call could write, for its steps or in
    its time) is asked again: for fewer steps than it had begun."""
    cap = req.max_steps or 10
    begun = text.count('"intent"')
    fewer = max(1, (min(begun, cap) if begun else cap) // 2)
    return (
        f"the answer was cut off after {tokens} tokens, the most this call could write: "
        f"plan fewer steps (at most {fewer}), with short intents and evidence"
    )


def _cut_before_pace(tokens: int) -> str:
    """Why a plan cut off before the model's pace was known is asked again as it was."""
    return (
        f"the answer was cut off after {tokens} tokens, the most a call could write before "
        "this model's pace was known; the next call has room for more steps"
    )


class JudgeAnswer(BaseModel):
    """What the judge must answer: the quote first, so that a pass is read off the
    evidence rather than argued after it."""

    quote: str = ""
    passed: bool
    reason: str


PLAN_SCHEMA = AgentPlan.model_json_schema()
VERDICT_SCHEMA = JudgeAnswer.model_json_schema()
# What the schema adds to a judge's prompt where the server is told it in text.
VERDICT_SCHEMA_TOKENS = context.estimate_tokens(json.dumps(VERDICT_SCHEMA))


def _cut_to(text: str, tokens: int) -> str:
    """`text` within about `tokens` (estimated as longrun.context does), cut from its end."""
    data = text.encode()
    most = max(0, tokens - 20) * context.BYTES_PER_TOKEN
    if len(data) <= most:
        return text
    kept = data[:most].decode(errors="ignore")
    return f"{kept}\n… [cut to fit the model's context window: {len(data)} bytes in all]"


def _simplified_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = tool.get("function")
    if not isinstance(function, dict) or "parameters" not in function:
        return tool
    parameters = structured.tool_parameters(function["parameters"])
    return {**tool, "function": {**function, "parameters": parameters}}


def _explain(exc: ValueError, text: str) -> str:
    if isinstance(exc, ValidationError):
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}"
            for e in exc.errors()[:5]
        )
    else:
        problems = str(exc)
    return f"{problems} (answer began: {text[:200]!r})"


def small(goal: str) -> bool:
    """Whether a goal is one step: one sentence, on one line, within SMALL_GOAL_CHARS."""
    text = goal.strip()
    if len(text) > SMALL_GOAL_CHARS or "\n" in text:
        return False
    return len(_SENTENCE_END.findall(text)) <= 1
