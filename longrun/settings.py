"""Typed settings for every longrun process, read from the environment and `.env`."""

from __future__ import annotations

import contextlib
import hashlib
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from longrun.contracts import Limits, Price, Role
from longrun.destinations import DENY_SETTING, Entry, pair, parse_entry

# Where Temporal's HTTP API is: its gRPC port + 10 (`longrun dev` starts it there).
TEMPORAL_HTTP_API_OFFSET = 10
BUILD_ID_PATTERN = r"^[A-Za-z0-9_.+-]{1,100}$"  # a worker version's build id


class ApiKey(BaseModel):
    """One API key: who holds it, its SHA-256 hex digest (never the key), its roles."""

    name: str = Field(min_length=1, max_length=100, description="who holds the key")
    sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$",
        description="the key's SHA-256 hex digest (`longrun hash-key`), never the key",
    )
    roles: list[Role] = Field(
        min_length=1, description="its roles: `viewer`, `submitter`, `approver`, `admin`"
    )
    secrets: list[str] = Field(
        default_factory=list,
        description="the secrets (LONGRUN_SECRETS names) runs submitted with this key may "
        'name; "*" for all. None by default, whatever the roles',
    )
    tenant: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9_.-]{1,100}$",
        description="a key of a tenant sees only its tenant's runs, schedules, approvals and "
        "metrics; unset: no tenant",
    )


def hash_key(key: str) -> str:
    """The form in which an API key is kept in settings: its SHA-256 hex digest."""
    return hashlib.sha256(key.encode()).hexdigest()


class OutputTokens(BaseModel):
    """The most tokens a model may answer with, per role: every call sets `max_tokens`, so
    a model that does not stop cannot fill its server's context."""

    plan: int = Field(
        32_768,
        ge=16,
        description="the planner's answer (a plan of a thousand steps needs ~25,000)",
    )
    act: int = Field(2048, ge=16, description="one turn of the actor")
    judge: int = Field(
        1024, ge=16, description="the judge's verdict: whether a statement holds, given evidence"
    )
    compact: int = Field(
        1024, ge=16, description="the rolling summary the oldest progress entries are folded into"
    )
    complete: int = Field(
        2048, ge=16, description="plan model steps without their own `max_tokens`"
    )


Strategy = Literal["auto", "plan", "direct"]
StructuredOutput = Literal["auto", "json_schema", "json_object", "tool", "prompt"]


class Settings(BaseSettings):
    """Configuration shared by the worker, the API and the CLI.

    Names follow the environment variables a user sets; none of these values is
    ever passed into workflow history except what `RunConfig` copies on purpose.
    Every field's `description` is its row in docs/settings.md (`make docs`).
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    temporal_address: str = Field(
        "127.0.0.1:7233",
        alias="TEMPORAL_ADDRESS",
        description="Temporal frontend (host:port; `make run`: 127.0.0.1 on "
        "LONGRUN_DEV_TEMPORAL_PORT)",
    )
    temporal_namespace: str = Field(
        "default",
        alias="TEMPORAL_NAMESPACE",
        description="the Temporal namespace of runs, schedules and the Worker Deployment",
    )
    temporal_ui_url: str = Field(
        "http://127.0.0.1:8233",
        alias="LONGRUN_TEMPORAL_UI_URL",
        description="the Temporal Web UI: base of `links.temporal_ui` (`make run`: 127.0.0.1 "
        "on LONGRUN_DEV_UI_PORT)",
    )
    task_queue: str = Field(
        "longrun",
        alias="LONGRUN_TASK_QUEUE",
        description="the Temporal task queue workers poll and runs start on",
    )
    worker_shutdown_s: float = Field(
        60.0,
        alias="LONGRUN_WORKER_SHUTDOWN_S",
        ge=0,
        description="seconds a worker told to stop (SIGTERM, SIGINT) lets the activities it "
        "runs finish before it cancels them (and another worker runs them again): a rolling "
        "deploy should not run a tool twice",
    )
    max_cached_runs: int = Field(
        1000,
        alias="LONGRUN_MAX_CACHED_RUNS",
        ge=0,
        description="runs a worker keeps in memory between their workflow tasks (about 110 KB "
        "each while waiting); one pushed out costs nothing while it waits, and replays its "
        "history at its next task (a signal, a query, an activity's result)",
    )
    versioning: bool = Field(
        True,
        alias="LONGRUN_VERSIONING",
        description="workers run as versions of a Temporal Worker Deployment "
        "(longrun/versions.py): a run stays on the version it started on until a hand-over "
        "moves it to the current one (docs/operations.md)",
    )
    deployment: str = Field(
        "longrun",
        alias="LONGRUN_DEPLOYMENT",
        pattern=r"^[A-Za-z0-9_-]{1,100}$",
        description="the Worker Deployment's name (the API reads it for `/readyz`)",
    )
    build_id: str | None = Field(
        None,
        alias="LONGRUN_BUILD_ID",
        pattern=BUILD_ID_PATTERN,
        description="this worker's version; unset: the package version and the code's digest "
        "(`dev` under `longrun dev`)",
    )
    promote: Literal["new", "manual", "start"] = Field(
        "new",
        alias="LONGRUN_PROMOTE",
        description="when a starting worker's version becomes current (takes new runs): `new`, "
        "when the first worker of a version never current before starts; `manual`, when an "
        "operator says (`longrun deployment current`), or when the deployment has no current "
        "version yet; `start`, whenever one of its workers starts (`make run`: `start`)",
    )

    openai_base_url: str | None = Field(
        None,
        alias="OPENAI_BASE_URL",
        description="any OpenAI-compatible server: OpenAI, vLLM, Ollama, llama.cpp; unset: "
        "OpenAI's (`make run`: its stand-in, when OPENAI_API_KEY is unset too)",
    )
    openai_api_key: SecretStr | None = Field(
        None,
        alias="OPENAI_API_KEY",
        description="the key of the server in OPENAI_BASE_URL (local servers accept any); with "
        "neither set, no model server is configured (`make run`: its stand-in)",
    )
    model: str = Field(
        "gpt-4.1-mini", alias="LONGRUN_MODEL", description="model of steps and roles that name none"
    )
    prices: dict[str, Price] = Field(
        default_factory=dict,
        alias="LONGRUN_PRICES",
        description='JSON, USD per million tokens: `{"gpt-4.1-mini": {"input": 0.4, "output": '
        "1.6}}`",
    )
    max_steps: int = Field(
        40,
        alias="LONGRUN_MAX_STEPS",
        ge=1,
        le=10_000,
        description="actor turns of a goal-only run that sets no `max_steps` (at most 10,000)",
    )
    max_child_runs: int = Field(
        100,
        alias="LONGRUN_MAX_CHILD_RUNS",
        ge=0,
        le=10_000,
        description="child runs one run may start: run steps, for_each items, delegations (a "
        "plan that lists more is refused; the step that would start one more fails; at most "
        "10,000)",
    )
    policy_file: Path | None = Field(
        None, alias="LONGRUN_POLICY_FILE", description="TOML permission policy file"
    )
    mcp_servers_file: Path | None = Field(
        None,
        alias="LONGRUN_MCP_SERVERS",
        description="TOML or JSON file of MCP servers whose tools runs may call "
        "(`mcp.<server>.<tool>`; longrun/mcp_servers.py)",
    )
    budget_defaults: Limits = Field(
        default_factory=Limits,
        alias="LONGRUN_BUDGET_DEFAULTS",
        description="JSON limits, as in a run's `budget`: each limit a run does not set",
    )
    budget_ceilings: Limits = Field(
        default_factory=Limits,
        alias="LONGRUN_BUDGET_CEILINGS",
        description="JSON limits, as in a run's `budget`: no run or budget change may go above "
        "them; a limit set by neither the run nor LONGRUN_BUDGET_DEFAULTS is its ceiling",
    )
    model_timeout_s: float = Field(
        120.0,
        alias="LONGRUN_MODEL_TIMEOUT_S",
        gt=0,
        description="seconds a model server may stay silent (no token, no byte) before the "
        'attempt is called "busy" and retried; the whole call is bounded by the activity\'s own '
        "timeout",
    )
    model_retry_window_s: float = Field(
        1800.0,
        alias="LONGRUN_MODEL_RETRY_WINDOW_S",
        gt=0,
        description="seconds a model call keeps retrying an outage (connection refused, "
        "timeouts, 408/409/429/5xx) when its step sets no `retry`; after it the run pauses "
        "(`model_unavailable`) until resumed",
    )
    structured_output: StructuredOutput = Field(
        "auto",
        alias="LONGRUN_STRUCTURED_OUTPUT",
        description="how JSON answers are asked for: `json_schema`, `json_object` (with a "
        "schema, as llama.cpp takes it), `tool` (a forced tool call), `prompt`; `auto` starts "
        "with `json_schema` and falls back per model to what the server accepts "
        "(activities/endpoint.py)",
    )
    tool_choice: Literal["auto", "native", "routed"] = Field(
        "auto",
        alias="LONGRUN_TOOL_CHOICE",
        description='how the actor\'s tool calls are asked for: `auto` offers the tools ("auto" '
        "tool choice) and routes a model's calls once it calls them badly three answers in a "
        "row (one JSON action that longrun turns into the call), `native` never routes, "
        "`routed` always does (activities/routed_calls.py)",
    )
    agent_strategy: Strategy = Field(
        "auto",
        alias="LONGRUN_AGENT_STRATEGY",
        description="how a goal-only run without `strategy` starts: `plan` asks the planner "
        "for steps (the run fails if it gives no valid plan), `direct` works on the goal as "
        "one step, `auto` goes direct for a goal of one short sentence or a model this worker "
        "saw plan badly, else plans, and goes direct when no valid plan comes",
    )
    model_stream: bool = Field(
        True,
        alias="LONGRUN_MODEL_STREAM",
        description="stream answers (the call heartbeats, and a cancel stops the server "
        "generating); `false` for servers that report usage only for whole answers",
    )
    record_model_calls: bool = Field(
        False,
        alias="LONGRUN_RECORD_MODEL_CALLS",
        description="keep every model call of a run (request and answer) as an artifact of the "
        "run, for `longrun cassette RUN_ID` (longrun/cassettes.py)",
    )
    max_output_tokens: OutputTokens = Field(
        default_factory=OutputTokens,
        alias="LONGRUN_MAX_OUTPUT_TOKENS",
        description='JSON, `max_tokens` per role: `{"plan": 32768, "act": 2048, "judge": 1024, '
        '"compact": 1024, "complete": 2048}` (a role left out keeps its default); a model step '
        "may set its own `max_tokens`",
    )
    context_windows: dict[str, int] = Field(
        default_factory=dict,
        alias="LONGRUN_CONTEXT_WINDOWS",
        description='JSON, tokens per model: `{"smollm2-135m": 8192}`; otherwise read from the '
        "server's model list or its own error, and prompts are kept within it",
    )

    data_dir: Path = Field(
        Path(".longrun/data"),
        alias="LONGRUN_DATA_DIR",
        description="run workspaces, journals and (with the local store) artifacts; API and "
        "workers share it",
    )
    http_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="LONGRUN_HTTP_ALLOW_HOSTS",
        description="comma-separated `host:port` entries (`*.example.com:443` for names below) "
        "runs may connect to (longrun/destinations.py); loopback and private addresses only "
        "when named exactly. Empty: none (`make run`: its stand-in, when it serves one)",
    )
    denied_destinations: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        alias="LONGRUN_DENIED_DESTINATIONS",
        description="comma-separated `host:port` or `host:*` (every port of a host) entries "
        "runs never reach, even when allowed: Temporal's history, matching, membership and "
        "metrics ports, say. Empty by default (`make run`: every port of its Temporal)",
    )

    trace_console: bool = Field(
        False, alias="LONGRUN_TRACE_CONSOLE", description="print OpenTelemetry spans to stderr"
    )
    metrics_address: str | None = Field(
        None,
        alias="LONGRUN_METRICS_ADDRESS",
        description="host:port where a worker serves Prometheus metrics (`/metrics`); unset: "
        "none (`make run`: 127.0.0.1 on LONGRUN_DEV_WORKER_METRICS_PORT)",
    )

    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        alias="LONGRUN_SECRETS",
        description="JSON: secret name → value; tools name them, only activities read them",
    )
    api_keys: list[ApiKey] = Field(
        default_factory=list,
        alias="LONGRUN_API_KEYS",
        description='JSON: `[{"name": "ci", "sha256": "<digest>", "roles": ["submitter"], '
        '"secrets": ["svc_token"], "tenant": "acme"}]` (`tenant` optional); none: the API '
        "answers loopback clients only",
    )
    approval_timeout_s: float | None = Field(
        None,
        alias="LONGRUN_APPROVAL_TIMEOUT_S",
        gt=0,
        description="seconds an approval waits for a person unless its step says; unset: forever",
    )
    approval_on_timeout: Literal["reject", "skip", "fail", "remind", "escalate"] = Field(
        "remind",
        alias="LONGRUN_APPROVAL_ON_TIMEOUT",
        description="what happens to an approval once it has waited its time: `reject`, "
        "`skip`, `fail`, `remind` or `escalate` (to LONGRUN_APPROVAL_ESCALATE_TO)",
    )
    approval_escalate_to: Role = Field(
        "admin",
        alias="LONGRUN_APPROVAL_ESCALATE_TO",
        description="to whom `escalate` hands an approval: the role that decides it once it "
        "has waited its time",
    )
    webhooks: list[str] = Field(
        default_factory=list,
        alias="LONGRUN_WEBHOOKS",
        description="JSON list of URLs every run notifies (besides a run's own webhooks)",
    )
    webhook_secret: SecretStr | None = Field(
        None,
        alias="LONGRUN_WEBHOOK_SECRET",
        description="the key that signs every webhook (HMAC-SHA256)",
    )
    four_eyes: bool = Field(
        False,
        alias="LONGRUN_FOUR_EYES",
        description="forbid approving steps of one's own runs (with API keys configured)",
    )

    api_host: str = Field(
        "127.0.0.1", alias="LONGRUN_API_HOST", description="the address the API listens on"
    )
    api_port: int = Field(8000, alias="LONGRUN_API_PORT", description="the API's port")
    continue_as_new_every: int = Field(
        500,
        alias="LONGRUN_CONTINUE_AS_NEW_EVERY",
        ge=1,
        description="a run starts a fresh history segment after this many steps (plan steps, "
        "or an agent's verified steps)",
    )
    prompt_token_budget: int = Field(
        12_000,
        alias="LONGRUN_PROMPT_TOKEN_BUDGET",
        ge=1000,
        description="most estimated tokens in one actor prompt (at least 1000); see "
        "docs/architecture.md for the trimming order",
    )
    artifact_threshold_bytes: int = Field(
        8192,
        alias="LONGRUN_ARTIFACT_THRESHOLD_BYTES",
        ge=256,
        description="output strings above this many bytes go to the artifact store (at least 256)",
    )
    artifact_store: Literal["local", "s3"] = Field(
        "local",
        alias="LONGRUN_ARTIFACT_STORE",
        description="where big outputs live: `local` (files under `LONGRUN_DATA_DIR`) or `s3` "
        "(an S3-compatible bucket; credentials come from boto3's own chain: "
        "AWS_ACCESS_KEY_ID, profiles, roles)",
    )
    s3_bucket: str | None = Field(
        None,
        alias="LONGRUN_S3_BUCKET",
        description="the bucket of stored outputs; required with `s3`",
    )
    s3_prefix: str = Field(
        "longrun/",
        alias="LONGRUN_S3_PREFIX",
        pattern=r"^(?:[^/]+/)*$",
        description="key prefix (empty, or ending in `/`): objects are `<prefix><run_id>/<sha256>`",
    )
    s3_endpoint_url: str | None = Field(
        None,
        alias="LONGRUN_S3_ENDPOINT_URL",
        description="an S3-compatible server (MinIO and the like); unset is AWS",
    )
    s3_region: str | None = Field(
        None,
        alias="LONGRUN_S3_REGION",
        description="the bucket's region, if the server needs one",
    )
    artifact_retention_days: float | None = Field(
        None,
        alias="LONGRUN_ARTIFACT_RETENTION_DAYS",
        gt=0,
        description="delete stored outputs of ended runs older than this many days (hourly, by "
        "workers); unset keeps them",
    )
    sandbox: Literal["bwrap", "unconfined"] = Field(
        "bwrap",
        alias="LONGRUN_SANDBOX",
        description="how process tools (shell, python, commands in checks) run: `bwrap`, "
        "confined by bubblewrap, or `unconfined` (an operator's explicit choice), as the "
        'worker\'s user with its files, environment and network (see "Security model" in '
        "docs/guide.md; activities/tools/sandbox.py)",
    )
    sandbox_memory_mb: int = Field(
        4096,
        alias="LONGRUN_SANDBOX_MEMORY_MB",
        ge=64,
        description="MB of memory one step's processes may use together (a cgroup, swap off)",
    )
    sandbox_processes: int = Field(
        256,
        alias="LONGRUN_SANDBOX_PROCESSES",
        ge=4,
        description="processes one step may have at once",
    )
    sandbox_file_mb: int = Field(
        1024,
        alias="LONGRUN_SANDBOX_FILE_MB",
        ge=1,
        description="MB of any one file a step's processes write",
    )
    sandbox_tmp_mb: int = Field(
        256,
        alias="LONGRUN_SANDBOX_TMP_MB",
        ge=1,
        description="MB of a step's `/tmp` (a sized tmpfs)",
    )
    workspace_mb: int = Field(
        4096,
        alias="LONGRUN_WORKSPACE_MB",
        ge=1,
        description="MB all of a run's steps may keep in its workspace",
    )
    sandbox_cgroup: Path | None = Field(
        None,
        alias="LONGRUN_SANDBOX_CGROUP",
        description="a cgroup (v2) delegated to a non-root worker's user, where it makes each "
        "step's group for per-step bounds; unset: `/sys/fs/cgroup` for a root worker",
    )
    sandbox_unenforced: Annotated[list[Literal["memory"]], NoDecode] = Field(
        default_factory=list,
        alias="LONGRUN_SANDBOX_UNENFORCED",
        description="comma-separated bounds the operator accepts this worker cannot enforce: "
        "`memory` to accept per-process memory limits where no cgroup is writable; any other "
        "bound that cannot be enforced refuses process tools",
    )
    max_request_bytes: int = Field(
        1_048_576,
        alias="LONGRUN_MAX_REQUEST_BYTES",
        gt=0,
        description="the largest request body the API reads, in bytes; a bigger one is refused "
        "(`too_large`) before any route sees it",
    )

    dev_temporal_port: int = Field(
        7233,
        alias="LONGRUN_DEV_TEMPORAL_PORT",
        description="port of `make run`'s Temporal dev server (gRPC; its HTTP API is 10 above)",
    )
    dev_ui_port: int = Field(
        8233, alias="LONGRUN_DEV_UI_PORT", description="port of `make run`'s Temporal Web UI"
    )
    dev_standin_port: int = Field(
        8100,
        alias="LONGRUN_DEV_STANDIN_PORT",
        description="port of `make run`'s model stand-in (served when no model server is "
        "configured)",
    )
    dev_worker_metrics_port: int = Field(
        9464,
        alias="LONGRUN_DEV_WORKER_METRICS_PORT",
        description="port of `make run`'s worker metrics, unless LONGRUN_METRICS_ADDRESS is set",
    )

    def allowed_destinations(self) -> list[Entry]:
        """The allow-list, parsed (validated when the settings were read)."""
        return [parse_entry(each) for each in self.http_allow_hosts]

    def own_services(self) -> dict[Entry, str]:
        """Endpoints runs never reach, with what they are: Temporal (gRPC, and the dev
        server's HTTP API), its Web UI, the API, the worker's metrics, and
        LONGRUN_DENIED_DESTINATIONS."""
        temporal_host, _, temporal_port = self.temporal_address.rpartition(":")
        ui = urlsplit(self.temporal_ui_url)
        found = {
            pair(temporal_host, temporal_port): "Temporal",
            pair(ui.hostname or "", str(ui.port or 80)): "the Temporal Web UI",
            pair(self.api_host, str(self.api_port)): "the longrun API",
        }
        if self.metrics_address:
            found[self.metrics_address] = "the worker's metrics"
        if temporal_port.isdigit():
            http_api = int(temporal_port) + TEMPORAL_HTTP_API_OFFSET
            found[pair(temporal_host, str(http_api))] = "Temporal's HTTP API"
        own: dict[Entry, str] = {}
        for endpoint, what in found.items():
            with contextlib.suppress(ValueError):  # an address that names no port
                own[parse_entry(endpoint)] = what
        for each in self.denied_destinations:
            own[parse_entry(each, any_port=True)] = f"denied ({DENY_SETTING})"
        return own

    @field_validator("http_allow_hosts", "denied_destinations", "sandbox_unenforced", mode="before")
    @classmethod
    def _split_hosts(cls, value: object) -> object:
        if isinstance(value, str):
            return [h.strip().lower() for h in value.split(",") if h.strip()]
        return value

    @field_validator("http_allow_hosts")
    @classmethod
    def _allowed_are_pairs(cls, value: list[str]) -> list[str]:
        for each in value:
            parse_entry(each)  # raises, naming the entry and the form it needs
        return value

    @field_validator("denied_destinations")
    @classmethod
    def _denied_are_pairs(cls, value: list[str]) -> list[str]:
        for each in value:
            parse_entry(each, any_port=True)
        return value

    @model_validator(mode="after")
    def _s3_needs_a_bucket(self) -> Settings:
        if self.artifact_store == "s3" and not self.s3_bucket:
            raise ValueError("LONGRUN_ARTIFACT_STORE=s3 needs LONGRUN_S3_BUCKET")
        return self

    @property
    def artifacts_dir(self) -> Path:
        """Directory holding one artifact folder per run."""
        return _resolved(self.data_dir, os.getcwd()) / "artifacts"

    @property
    def workspaces_dir(self) -> Path:
        """Directory holding one workspace directory per run."""
        return _resolved(self.data_dir, os.getcwd()) / "runs"


@lru_cache(maxsize=64)
def _resolved(path: Path, cwd: str) -> Path:
    """`path` made absolute from `cwd`, its links resolved. Cached: a worker asks for its
    data directory on every tool call, and resolving costs a system call per part of it."""
    return (Path(cwd) / path).resolve()


@lru_cache
def get_settings() -> Settings:
    """Settings of this process, read once."""
    return Settings()
