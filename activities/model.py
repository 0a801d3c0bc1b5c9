"""The `model.complete` activity: one Chat Completions call through the openai package.

The client never retries on its own (`max_retries=0`): Temporal owns retries, so each
attempt is visible in history and bounded by the step's retry policy.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessage
from pydantic import BaseModel, ValidationError
from temporalio import activity

from activities.artifacts import store_for
from activities.errors import fatal, reported_with_attempt, retry_after_seconds, transient
from activities.memory import Journal
from longrun import context, prompts
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

RETRYABLE_STATUS = frozenset({408, 409, 429})
TOOL_RESULT_CHARS = 16_000  # of one tool result, as the actor reads it
RECALL_NOTES = 5  # journal notes offered to the actor per call


class ModelActivities:
    """Model calls, bound to one OpenAI-compatible endpoint from settings."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: AsyncOpenAI | None = None
        self._store = store_for(settings)
        self._journal = Journal.of(settings)

    def _get_client(self) -> AsyncOpenAI:
        if self._client is None:
            key = self._settings.openai_api_key
            if key is None and self._settings.openai_base_url is None:
                raise fatal(
                    "no model endpoint is configured: set OPENAI_API_KEY, or OPENAI_BASE_URL "
                    "for another OpenAI-compatible server",
                    type="ModelNotConfigured",
                )
            self._client = AsyncOpenAI(
                base_url=self._settings.openai_base_url,
                # Local servers (vLLM, Ollama, llama.cpp) accept any key.
                api_key=key.get_secret_value() if key else "unused",
                max_retries=0,
                timeout=self._settings.model_timeout_s,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections of the client, if one was made."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def chat(
        self, model: str, messages: list[dict[str, Any]], **extra: Any
    ) -> tuple[ChatCompletionMessage, ModelUsage]:
        """One Chat Completions call; provider errors become retryable or fatal errors."""
        # Give up on the HTTP call when Temporal gives up on the attempt, not later.
        budget = activity.info().start_to_close_timeout
        timeout = self._settings.model_timeout_s
        if budget:
            timeout = min(timeout, budget.total_seconds())
        try:
            response = (
                await self._get_client()
                .with_options(timeout=timeout)
                .chat.completions.create(model=model, messages=messages, **extra)  # type: ignore[arg-type]
            )
        except openai.APIStatusError as exc:
            message = f"model endpoint answered {exc.status_code}: {exc.message}"
            if exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500:
                retry_after = retry_after_seconds(exc.response.headers.get("retry-after"))
                raise transient(message, retry_after_s=retry_after) from exc
            raise fatal(message, type="ModelRequestRejected") from exc
        except (openai.APITimeoutError, openai.APIConnectionError) as exc:
            raise transient(f"model endpoint unreachable: {exc}") from exc
        if not response.choices:
            raise transient("model answered without choices")
        usage = response.usage
        return response.choices[0].message, ModelUsage(
            model=model,  # the name asked for: prices and budgets are keyed by it
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
        )

    @activity.defn(name="model.complete")
    async def complete(self, req: ModelRequest) -> ModelResult:
        """Ask the model once; transient provider failures are raised for Temporal to retry."""
        with reported_with_attempt() as attempt:
            # Artifact reads are file I/O: off the event loop, like the tools'.
            prompt, system = await asyncio.to_thread(
                self._store.expand, req.run_id, [req.prompt, req.system]
            )
            messages: list[dict[str, Any]] = []
            if system:
                messages.append({"role": "system", "content": system})
            messages.append({"role": "user", "content": prompt})
            extra: dict[str, Any] = {}
            if req.json_schema is not None:
                extra["response_format"] = _json_format("output", req.json_schema)
            message, usage = await self.chat(req.model, messages, **extra)
            text = message.content or ""
            json_value: Any = None
            json_error: str | None = None
            if req.json_schema is not None:
                try:
                    json_value = json.loads(text)
                except ValueError:
                    json_error = f"model output is not valid JSON: {text[:200]!r}"
            threshold = self._settings.artifact_threshold_bytes
            stored = await asyncio.to_thread(self._store.offload, req.run_id, text, threshold)
            return ModelResult(
                text=stored,
                json_value=json_value,
                json_error=json_error,
                model=usage.model,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                attempt=attempt,
            )

    @activity.defn(name="model.plan")
    async def plan(self, req: PlanRequest) -> PlanAttempt:
        """Ask the planner for a plan; an invalid answer is returned, not raised, so the
        workflow can re-ask with the reason (and count the tokens it cost)."""
        with reported_with_attempt() as attempt:
            message, usage = await self.chat(
                req.model,
                [
                    {"role": "system", "content": prompts.PLANNER},
                    {"role": "user", "content": prompts.plan_request(req)},
                ],
                response_format=_json_format("plan", PLAN_SCHEMA),
            )
            text = message.content or ""
            try:
                plan = AgentPlan.model_validate_json(text)
            except ValidationError as exc:
                return PlanAttempt(error=_explain(exc, text), usage=usage, attempt=attempt)
            return PlanAttempt(plan=plan, usage=usage, attempt=attempt)

    @activity.defn(name="model.act")
    async def act(self, req: ActRequest) -> ActResult:
        """One turn of the actor: it answers, calls tools, or both."""
        with reported_with_attempt() as attempt:
            messages, trimmed = await asyncio.to_thread(self._prompt, req)
            message, usage = await self.chat(req.model, messages, tools=req.tools)
            calls = [
                ToolCallRequest(id=c.id, name=c.function.name, arguments=c.function.arguments)
                for c in message.tool_calls or []
                if c.type == "function"
            ]
            return ActResult(
                content=message.content,
                tool_calls=calls,
                usage=usage,
                attempt=attempt,
                trimmed=trimmed,
            )

    def _prompt(self, req: ActRequest) -> tuple[list[dict[str, Any]], list[str]]:
        """The actor's messages: tool results read back in, and with a brief, the prompt
        assembled around the journal's relevant notes within the token budget. Blocking
        file work: call it in a thread."""
        turns = [self._read_through(req.run_id, m) for m in req.messages]
        if req.brief is None:
            return turns, []
        found = self._journal.search(req.run_id, req.brief.recall, RECALL_NOTES)
        notes = [f"[{n.kind}, {n.step}] {n.text}" for n in found]
        return context.assemble(req.brief, notes, turns, req.tools)

    @activity.defn(name="context.compact")
    async def compact(self, req: CompactRequest) -> CompactResult:
        """Fold the oldest progress entries into the rolling summary; the entries
        themselves stay in the journal."""
        with reported_with_attempt():
            message, usage = await self.chat(
                req.model,
                [
                    {"role": "system", "content": prompts.COMPACTOR},
                    {"role": "user", "content": prompts.compact_request(req)},
                ],
            )
            summary = (message.content or "").strip()
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

    async def judge(self, model: str, goal: str, statement: str, evidence: str) -> Verdict:
        """Ask the judge whether `statement` holds, given `evidence`; it must cite a reason."""
        message, usage = await self.chat(
            model,
            [
                {"role": "system", "content": prompts.JUDGE},
                {"role": "user", "content": prompts.judge_request(goal, statement, evidence)},
            ],
            response_format=_json_format("verdict", VERDICT_SCHEMA),
        )
        text = message.content or ""
        try:
            answer = JudgeAnswer.model_validate_json(text)
        except ValidationError as exc:
            # An unreadable verdict is a failed check (and its tokens still count).
            reason = f"the judge's answer was not a verdict: {_explain(exc, text)}"
            return Verdict(passed=False, evidence=reason, usage=usage)
        if answer.passed and not answer.reason.strip():
            return Verdict(
                passed=False, evidence="the judge confirmed without citing a reason", usage=usage
            )
        return Verdict(passed=answer.passed, evidence=answer.reason, usage=usage)


class JudgeAnswer(BaseModel):
    """What the judge must answer."""

    passed: bool
    reason: str


PLAN_SCHEMA = AgentPlan.model_json_schema()
VERDICT_SCHEMA = JudgeAnswer.model_json_schema()


def _json_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def _explain(exc: ValidationError, text: str) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()[:5]
    )
    return f"{problems} (answer began: {text[:200]!r})"
