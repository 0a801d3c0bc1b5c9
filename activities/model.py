"""The `model.complete` activity: one Chat Completions call through the openai package.

The client never retries on its own (`max_retries=0`): Temporal owns retries, so each
attempt is visible in history and bounded by the step's retry policy.
"""

from __future__ import annotations

import json
from typing import Any

import openai
from openai import AsyncOpenAI
from temporalio import activity

from activities.errors import fatal, reported_with_attempt, transient
from longrun.contracts import ModelRequest, ModelResult
from longrun.settings import Settings

RETRYABLE_STATUS = frozenset({408, 409, 429})


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


class ModelActivities:
    """Model calls, bound to one OpenAI-compatible endpoint from settings."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: AsyncOpenAI | None = None

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

    @activity.defn(name="model.complete")
    async def complete(self, req: ModelRequest) -> ModelResult:
        """Ask the model once; transient provider failures are raised for Temporal to retry."""
        with reported_with_attempt() as attempt:
            messages: list[dict[str, Any]] = []
            if req.system:
                messages.append({"role": "system", "content": req.system})
            messages.append({"role": "user", "content": req.prompt})
            extra: dict[str, Any] = {}
            if req.json_schema is not None:
                extra["response_format"] = {
                    "type": "json_schema",
                    "json_schema": {"name": "output", "schema": req.json_schema},
                }
            # Give up on the HTTP call when Temporal gives up on the attempt, not later.
            budget = activity.info().start_to_close_timeout
            timeout = self._settings.model_timeout_s
            if budget:
                timeout = min(timeout, budget.total_seconds())
            try:
                response = (
                    await self._get_client()
                    .with_options(timeout=timeout)
                    .chat.completions.create(
                        model=req.model,
                        messages=messages,  # type: ignore[arg-type]
                        **extra,
                    )
                )
            except openai.APIStatusError as exc:
                message = f"model endpoint answered {exc.status_code}: {exc.message}"
                if exc.status_code in RETRYABLE_STATUS or exc.status_code >= 500:
                    raise transient(message, retry_after_s=_retry_after(exc)) from exc
                raise fatal(message, type="ModelRequestRejected") from exc
            except (openai.APITimeoutError, openai.APIConnectionError) as exc:
                raise transient(f"model endpoint unreachable: {exc}") from exc

            if not response.choices:
                raise transient("model answered without choices")
            text = response.choices[0].message.content or ""
            json_value: Any = None
            if req.json_schema is not None:
                try:
                    json_value = json.loads(text)
                except ValueError as exc:
                    raise transient(f"model output is not valid JSON: {text[:200]!r}") from exc
            usage = response.usage
            return ModelResult(
                text=text,
                json_value=json_value,
                model=response.model or req.model,
                input_tokens=usage.prompt_tokens if usage else 0,
                output_tokens=usage.completion_tokens if usage else 0,
                attempt=attempt,
            )
