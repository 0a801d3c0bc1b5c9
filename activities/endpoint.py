"""One OpenAI-compatible model server as longrun finds it, not as OpenAI's is assumed to be.

Every call sets `max_tokens`, streams (so the activity heartbeats while tokens arrive, and
a cancelled or timed-out attempt closes the stream, which stops the server generating),
and sends messages without the `null` fields strict servers reject. Structured answers
are asked for the way the server accepts (learned per model, see activities/structured),
the context window is taken from settings, the server's model list or its own error
message, and every error names the URL and the model so a person knows what to fix.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx2 as httpx  # the HTTP client openai 3 speaks through
import openai
from openai import AsyncOpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion
from opentelemetry import trace
from opentelemetry.trace import SpanKind
from temporalio.exceptions import ApplicationError

from activities.errors import fatal, retry_after_seconds, transient
from activities.heartbeat import heartbeating
from activities.pace import Paces
from activities.structured import MODES, Mode, answer_text, ask, refuses
from longrun import recording
from longrun.context import estimate_tokens
from longrun.contracts import ModelUsage, ToolCallRequest
from longrun.settings import Settings

log = logging.getLogger("longrun.model")
TRACER = trace.get_tracer("longrun.model")

RETRYABLE_STATUS = frozenset({408, 409, 429})
# Room kept between a prompt's estimate and the window, for what the estimate misses.
WINDOW_MARGIN_TOKENS = 256
MIN_ANSWER_TOKENS = 16
ROUTE_AFTER = 3  # answers in a row with a tool call not read, before a model is routed
CONNECT_TIMEOUT_S = 10.0
# "This model's maximum context length is 8192 tokens" (OpenAI, vLLM), "exceed context
# window of 8192" (llama.cpp), "context length of 8192" and the like.
_WINDOW = re.compile(r"(?:context length|context window)\D{0,20}(\d{3,7})", re.IGNORECASE)
_OVERFLOW = re.compile(r"context (?:length|window)|too many tokens|prompt is too long", re.I)
# A 500 whose body is the server's own check of the request: the same request fails the
# same way every time, so retrying only delays the error.
_REQUEST_INVALID = re.compile(
    r"validation error|Input should be|failed to parse|invalid request", re.IGNORECASE
)
# "max_tokens is too large: 32768. This model supports at most 16384 completion tokens"
_MAX_OUTPUT = re.compile(r"max_tokens.*?at most (\d{2,7})", re.IGNORECASE | re.DOTALL)
_WINDOW_FIELDS = ("max_model_len", "context_length", "context_window", "n_ctx", "n_ctx_train")


@dataclass
class Answer:
    """A model's answer, however it arrived."""

    content: str | None
    tool_calls: list[ToolCallRequest]
    usage: ModelUsage
    finish_reason: str | None = None
    usage_reported: bool = True  # False: the server gave none, `usage` is an estimate


class ContextExceeded(Exception):
    """The prompt does not fit the model's context window (now known, if the server said)."""

    def __init__(self, message: str, window: int | None) -> None:
        super().__init__(message)
        self.window = window


class AnswerTooLong(Exception):
    """`max_tokens` is more than the model may answer with; it said how much it may."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


class Endpoint:
    """The model server in settings, and what has been learned of it in this process."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._client: AsyncOpenAI | None = None
        self.url = (settings.openai_base_url or "https://api.openai.com/v1").rstrip("/")
        self._modes: dict[str, Mode] = {}
        self._windows: dict[str, int] = dict(settings.context_windows)
        self._max_answers: dict[str, int] = {}  # the most a model may answer, where it said
        self._listed: dict[str, dict[str, Any]] | None = None
        self._stream_options = True  # whether the server takes `stream_options`
        # Models whose server streams no answer to a request without tools: asked whole.
        self._whole_without_tools: set[str] = set()
        self.streaming = settings.model_stream
        self.fixed_mode: Mode | None = None  # a way to ask for JSON that overrides settings
        self.paces = Paces()  # how fast each model reads and writes, from streamed calls
        self._routed: set[str] = set()  # models whose tool calls longrun routes
        self._unreadable: dict[str, int] = {}  # answers in a row with a call not read

    def client(self) -> AsyncOpenAI:
        """The openai client for this server (no retries of its own: Temporal retries)."""
        if self._client is None:
            key = self._settings.openai_api_key
            if key is None and self._settings.openai_base_url is None:
                raise fatal(
                    "no model endpoint is configured: set OPENAI_API_KEY, or OPENAI_BASE_URL "
                    "for another OpenAI-compatible server",
                    type="ModelNotConfigured",
                )
            read = self._settings.model_timeout_s
            self._client = AsyncOpenAI(
                base_url=self._settings.openai_base_url,
                # Local servers (vLLM, Ollama, llama.cpp) accept any key.
                api_key=key.get_secret_value() if key else "unused",
                max_retries=0,
                # `read` bounds silence between bytes, so a busy server is told apart from
                # one that cannot be reached (the connect timeout).
                timeout=httpx.Timeout(read, connect=min(CONNECT_TIMEOUT_S, read)),
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP connections, if any were made."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    # --- what the server serves -----------------------------------------------------------

    async def models(self) -> dict[str, dict[str, Any]]:
        """The models the server lists (`GET /models`), by id; cached."""
        if self._listed is None:
            try:
                page = await self.client().models.list()
            except openai.APIError as exc:
                error = self._error(exc, model=None)
                if isinstance(error, ApplicationError):
                    raise error from None
                raise fatal(str(error), type="ModelListRejected") from None
            self._listed = {m.id: m.model_dump() for m in page.data}
        return self._listed

    async def window(self, model: str) -> int | None:
        """The model's context window in tokens, if settings, the server's model list or
        an earlier error of the server tell it."""
        if model not in self._windows:
            try:
                listed = (await self.models()).get(model) or {}
            except ApplicationError:
                self._listed = {}  # a server without a model list: do not ask it again
                listed = {}
            found = _window_in(listed)
            if found is not None:
                self._windows[model] = found
        return self._windows.get(model)

    def mode(self, model: str) -> Mode:
        """How structured answers are asked of `model`: as set, or as learned."""
        setting = self.fixed_mode or self._settings.structured_output
        if setting != "auto":
            return setting
        return self._modes.get(model, MODES[0])

    def routes(self, model: str) -> bool:
        """Whether the actor's tool calls to `model` are routed by longrun."""
        return self._settings.tool_choice == "routed" or model in self._routed

    def route(self, model: str, why: str) -> bool:
        """An answer of `model` tried to call a tool and no call could be read from it
        (`why`): whether that turn is asked again routed (unless settings say never). After
        ROUTE_AFTER such answers in a row, its calls are routed from then on: one bad
        answer of a model that mostly calls well is no reason to ask it otherwise (a small
        model asked for one JSON action may copy the tools' schemas instead)."""
        if self._settings.tool_choice == "native":
            return False
        self._unreadable[model] = self._unreadable.get(model, 0) + 1
        if self._unreadable[model] >= ROUTE_AFTER and model not in self._routed:
            log.warning(
                "%s: model %s called tools badly with auto tool choice %d times in a row "
                "(%s); longrun routes its tool calls from now on",
                self.url,
                model,
                self._unreadable[model],
                why,
            )
            self._routed.add(model)
        return True

    def read_well(self, model: str) -> None:
        """An answer of `model` called a tool in a way that was read: the count of answers
        in a row that were not starts again."""
        self._unreadable.pop(model, None)

    # --- calls ------------------------------------------------------------------------------

    async def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        within_s: float | None = None,
        **extra: Any,
    ) -> Answer:
        """One Chat Completions call; provider errors become retryable or fatal errors
        that name the server and the model."""
        try:
            return await self.call(
                model, messages, max_tokens=max_tokens, within_s=within_s, **extra
            )
        except (Refused, ContextExceeded) as exc:
            raise fatal(str(exc), type="ModelRequestRejected") from None

    async def call(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int,
        within_s: float | None = None,
        **extra: Any,
    ) -> Answer:
        """`chat`, but a refused request shape raises `Refused` and a prompt too long for
        the model raises `ContextExceeded`, for the caller to ask differently. A call whose
        answer room overflows a window the server only now named is sent again, once,
        with the room that is left. With `within_s`, the answer is no longer than the
        model's pace lets it write in that time."""
        max_tokens = await self.room(model, messages, max_tokens, within_s)
        try:
            return await self._send(model, messages, max_tokens, extra)
        except AnswerTooLong as exc:
            self._max_answers[model] = exc.limit
            return await self._send(model, messages, min(max_tokens, exc.limit), extra)
        except ContextExceeded as exc:
            if exc.window is None:
                raise
            left = self.left(exc.window, messages)
            if left < MIN_ANSWER_TOKENS or left >= max_tokens:
                raise  # the prompt itself is too long
            return await self._send(model, messages, left, extra)

    async def room(
        self,
        model: str,
        messages: list[dict[str, Any]],
        wanted: int,
        within_s: float | None = None,
    ) -> int:
        """`max_tokens` for a call: as wanted, within what the model may answer, what it
        can write in `within_s` at its pace, and what the context window leaves."""
        wanted = min(wanted, self._max_answers.get(model, wanted))
        pace = self.paces.get(model)
        if within_s is not None and pace is not None:
            fits = pace.tokens_within(_prompt_tokens(messages), within_s)
            wanted = max(MIN_ANSWER_TOKENS, min(wanted, fits))
        window = await self.window(model)
        if window is None:
            return wanted
        return max(MIN_ANSWER_TOKENS, min(wanted, self.left(window, messages)))

    @staticmethod
    def left(window: int, messages: list[dict[str, Any]]) -> int:
        """Tokens a window leaves for the answer after `messages` (estimated, with room
        for what the estimate misses)."""
        return window - _prompt_tokens(messages) - WINDOW_MARGIN_TOKENS

    async def _send(
        self, model: str, messages: list[dict[str, Any]], max_tokens: int, extra: dict[str, Any]
    ) -> Answer:
        request: dict[str, Any] = {
            "model": model,
            "messages": [_on_the_wire(m) for m in messages],
            "max_tokens": max_tokens,
            **extra,
        }
        # A span per call, named and described as OpenTelemetry's GenAI conventions say.
        with TRACER.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT) as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": model,
                    "gen_ai.request.max_tokens": max_tokens,
                    "server.address": httpx.URL(self.url).host,
                }
            )
            async with heartbeating():
                try:
                    streamed = self.streaming and (
                        "tools" in request or model not in self._whole_without_tools
                    )
                    answer = (
                        await self._streamed(request) if streamed else await self._whole(request)
                    )
                except openai.APIError as exc:
                    raise self._error(exc, model) from None
                except httpx.HTTPError as exc:  # raised while a stream is read
                    raise self._broken(exc, model) from None
            recording.note(request, _recorded(answer))
            span.set_attributes(
                {
                    "gen_ai.response.model": answer.usage.model,
                    "gen_ai.usage.input_tokens": answer.usage.input_tokens,
                    "gen_ai.usage.output_tokens": answer.usage.output_tokens,
                    "gen_ai.response.finish_reasons": [answer.finish_reason or "unknown"],
                }
            )
            return answer

    async def _streamed(self, request: dict[str, Any]) -> Answer:
        options = {"stream_options": {"include_usage": True}} if self._stream_options else {}
        sent = time.monotonic()
        try:
            stream = await self.client().chat.completions.create(  # type: ignore[call-overload]
                **request, stream=True, **options
            )
        except openai.BadRequestError as exc:
            if not options or "stream_options" not in str(exc.message):
                raise
            self._stream_options = False  # an older server: ask without it from now on
            return await self._streamed(request)
        except openai.APITimeoutError:
            raise
        except openai.APIConnectionError:
            # llama.cpp may drop a streamed request it refuses; asked whole, it says why.
            return await self._whole(request)
        state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
        chunks = 0
        finished = False  # whether the stream said why the answer ended
        first: float | None = None  # when the first token came
        try:
            async for chunk in stream:
                state.handle_chunk(chunk)
                chunks += 1
                if first is None and chunk.choices:
                    first = time.monotonic()
                finished = finished or any(c.finish_reason for c in chunk.choices)
        except httpx.TransportError:
            if chunks:
                raise
        finally:
            # Also on cancel or timeout: closing the stream makes the server stop.
            await stream.close()
        if not finished:
            kind = stream.response.headers.get("content-type", "")
            if not chunks and not kind.startswith("text/event-stream"):
                raise transient(
                    f"model server {self.url} (model '{request['model']}') answered a "
                    f"streamed request with {kind or 'no content type'}, not a stream"
                )
            if (
                chunks
                and "tools" not in request
                and request["model"] not in self._whole_without_tools
            ):
                # llama-cpp-python's function-calling chat format streams nothing for a
                # request without tools (a role, then the end); asked whole, it answers.
                log.warning(
                    "%s streamed no answer for model %s to a request without tools; asking "
                    "such requests whole from now on",
                    self.url,
                    request["model"],
                )
                self._whole_without_tools.add(request["model"])
            # llama.cpp answers a request it refuses, when streamed, with an empty or broken
            # stream; asked whole, it says why (a context window exceeded, say).
            return await self._whole(request)
        try:
            completion: ChatCompletion = state.get_final_completion()
        except openai.LengthFinishReasonError as exc:
            # An answer cut at max_tokens is still the answer: the caller judges it.
            completion = exc.completion
        answer = _answer(completion, request["model"], request)
        if first is not None:
            self.paces.record(
                request["model"],
                answer.usage.input_tokens,
                answer.usage.output_tokens,
                first_token_s=first - sent,
                writing_s=time.monotonic() - first,
            )
        return answer

    async def _whole(self, request: dict[str, Any]) -> Answer:
        sent = time.monotonic()
        completion = await self.client().chat.completions.create(**request)
        answer = _answer(completion, request["model"], request)
        self.paces.record_whole(
            request["model"],
            answer.usage.input_tokens,
            answer.usage.output_tokens,
            time.monotonic() - sent,
        )
        return answer

    async def structured(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        name: str,
        schema: dict[str, Any],
        max_tokens: int,
        within_s: float | None = None,
    ) -> tuple[str, Answer]:
        """Ask for JSON matching `schema` the way the server takes it; the text that
        holds the JSON, and the answer. With `auto`, a refused way is not tried again for
        this model."""
        while True:
            mode = self.mode(model)
            sent, extra = ask(mode, name, schema, messages)
            try:
                answer = await self.call(
                    model, sent, max_tokens=max_tokens, within_s=within_s, **extra
                )
            except ContextExceeded as exc:
                raise fatal(str(exc), type="ModelRequestRejected") from None
            except Refused as exc:
                fallback = self._fall_back(model, mode, exc)
                if fallback is None:
                    raise fatal(str(exc), type="ModelRequestRejected") from None
                continue
            arguments = [c.arguments for c in answer.tool_calls]
            return answer_text(mode, answer.content, arguments), answer

    def _fall_back(self, model: str, mode: Mode, why: Refused) -> Mode | None:
        if self.fixed_mode or self._settings.structured_output != "auto" or mode == MODES[-1]:
            return None
        fallback = MODES[MODES.index(mode) + 1]
        self._modes[model] = fallback
        log.warning(
            "%s refused structured output by %s for model %s (%s); using %s from now on",
            self.url,
            mode,
            model,
            why.body[:200],
            fallback,
        )
        return fallback

    # --- errors -----------------------------------------------------------------------------

    def _error(self, exc: openai.APIError, model: str | None) -> Exception:
        where = f"model server {self.url}" + (f" (model '{model}')" if model else "")
        if isinstance(exc, openai.APIStatusError):
            status, body = exc.status_code, _body_of(exc)
            said = f"{where} answered {status}: {_message_in(body)[:500]}"
            most = _MAX_OUTPUT.search(body)
            if most is not None and status == 400:
                return AnswerTooLong(said, int(most.group(1)))
            if _OVERFLOW.search(body) and status in (400, 413, 422, 500):
                window = _window_from(body)
                if model is not None and window is not None:
                    self._windows[model] = window
                return ContextExceeded(said, window)
            if refuses(status, body):
                return Refused(said, body)
            if status == 404:
                return fatal(
                    f"{said}. Check OPENAI_BASE_URL (it usually ends in /v1) and that the "
                    "server serves LONGRUN_MODEL",
                    type="ModelNotFound",
                )
            if status in (401, 403):
                return fatal(f"{said}. Check OPENAI_API_KEY", type="ModelAccessDenied")
            if status in RETRYABLE_STATUS or (status >= 500 and not _REQUEST_INVALID.search(body)):
                retry_after = retry_after_seconds(exc.response.headers.get("retry-after"))
                return transient(said, retry_after_s=retry_after)
            return fatal(said, type="ModelRequestRejected")
        if isinstance(exc, openai.APITimeoutError):
            return self._broken(exc.__cause__ or exc, model)
        if isinstance(exc, openai.APIConnectionError):
            return transient(f"{where} is unreachable: {_said(exc.__cause__ or exc)}")
        return transient(f"{where} failed: {exc}")

    def _broken(self, exc: BaseException, model: str | None) -> ApplicationError:
        where = f"model server {self.url}" + (f" (model '{model}')" if model else "")
        if isinstance(exc, httpx.ConnectTimeout | httpx.ConnectError):
            return transient(f"{where} is unreachable: {_said(exc)}")
        if isinstance(exc, httpx.ReadTimeout):
            silent = self._settings.model_timeout_s
            return transient(f"{where} is busy: nothing came for {silent:g} s")
        return transient(f"{where} broke off its answer: {_said(exc)}")


async def model_problem(settings: Settings) -> str | None:
    """What a person should fix before runs call the model server in settings (it cannot
    be reached, or does not list LONGRUN_MODEL), or None."""
    endpoint = Endpoint(settings)
    try:
        listed = await endpoint.models()
    except ApplicationError as exc:
        return f"cannot list models: {exc.message}"
    finally:
        await endpoint.aclose()
    if listed and settings.model not in listed:
        served = ", ".join(sorted(listed)[:10])
        return (
            f"model server {endpoint.url} does not list LONGRUN_MODEL '{settings.model}' "
            f"(it serves: {served}); calls may fail with 404"
        )
    return None


class Refused(Exception):
    """The server refused the way a structured answer was asked for."""

    def __init__(self, message: str, body: str) -> None:
        super().__init__(message)
        self.body = body


def _on_the_wire(message: dict[str, Any]) -> dict[str, Any]:
    """A message as strict servers take it: no null fields, and `content: ""` rather than
    null for a turn that only calls tools (llama.cpp rejects null)."""
    sent = {k: v for k, v in message.items() if v is not None}
    if "content" not in sent:
        sent["content"] = ""
    return sent


def _answer(completion: ChatCompletion, model: str, request: dict[str, Any]) -> Answer:
    if not completion.choices:
        raise transient(f"model '{model}' answered without choices")
    choice = completion.choices[0]
    message = choice.message
    calls = [
        ToolCallRequest(
            # Some servers leave ids out; the turn's later messages must still match.
            id=c.id or f"call_{n}",
            name=c.function.name,
            arguments=c.function.arguments or "{}",
        )
        for n, c in enumerate(message.tool_calls or [])
        if c.type == "function"
    ]
    usage = completion.usage
    if usage is not None:
        tokens = ModelUsage(
            model=model,  # the name asked for: prices and budgets are keyed by it
            input_tokens=usage.prompt_tokens,
            output_tokens=usage.completion_tokens,
        )
    else:  # a server that does not report usage: a conservative estimate
        sent = _prompt_tokens(request["messages"])
        said = (message.content or "") + "".join(c.arguments for c in calls)
        tokens = ModelUsage(model=model, input_tokens=sent, output_tokens=estimate_tokens(said))
    return Answer(message.content, calls, tokens, choice.finish_reason, usage is not None)


def _recorded(answer: Answer) -> dict[str, Any]:
    """An answer as a cassette keeps it."""
    return {
        "content": answer.content,
        "tool_calls": [c.model_dump() for c in answer.tool_calls],
        "finish_reason": answer.finish_reason,
        "usage": {
            "prompt_tokens": answer.usage.input_tokens,
            "completion_tokens": answer.usage.output_tokens,
        },
    }


def _prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """The tokens `messages` take, estimated."""
    return sum(estimate_tokens(str(m.get("content") or "")) + 4 for m in messages)


def _said(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def _body_of(exc: openai.APIStatusError) -> str:
    try:
        return exc.response.text or exc.message
    except httpx.ResponseNotRead:
        return exc.message


def _message_in(body: str) -> str:
    """The message of an error body: OpenAI's and llama.cpp's `{"error": {"message"}}`,
    Ollama's `{"error": "..."}`, vLLM's `{"message"}`; otherwise the body itself."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body
    if not isinstance(parsed, dict):
        return body
    error = parsed.get("error")
    for said in (error.get("message") if isinstance(error, dict) else error, parsed.get("message")):
        if isinstance(said, str) and said:
            return said
    return body


def _window_from(text: str) -> int | None:
    found = _WINDOW.search(text)
    return int(found.group(1)) if found else None


def _window_in(listed: dict[str, Any]) -> int | None:
    for source in (listed, listed.get("meta") or {}):
        for field in _WINDOW_FIELDS:
            value = source.get(field)
            if isinstance(value, int) and value > 0:
                return value
    return None
