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

    name: str = Field(min_length=1, max_length=100)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    roles: list[Role] = Field(min_length=1)
    # The secrets (LONGRUN_SECRETS names) runs submitted with this key may name; "*" for
    # all. None by default, whatever the roles.
    secrets: list[str] = Field(default_factory=list)
    # A key of a tenant sees only its tenant's runs, schedules, approvals and metrics.
    tenant: str | None = Field(None, pattern=r"^[A-Za-z0-9_.-]{1,100}$")


def hash_key(key: str) -> str:
    """The form in which an API key is kept in settings: its SHA-256 hex digest."""
    return hashlib.sha256(key.encode()).hexdigest()


class OutputTokens(BaseModel):
    """The most tokens a model may answer with, per role: every call sets `max_tokens`, so
    a model that does not stop cannot fill its server's context."""

    plan: int = Field(32_768, ge=16, description="a plan of a thousand steps needs ~25,000")
    act: int = Field(2048, ge=16)
    judge: int = Field(1024, ge=16)
    compact: int = Field(1024, ge=16)
    complete: int = Field(2048, ge=16, description="plan model steps without their own")


Strategy = Literal["auto", "plan", "direct"]
StructuredOutput = Literal["auto", "json_schema", "json_object", "tool", "prompt"]


class Settings(BaseSettings):
    """Configuration shared by the worker, the API and the CLI.

    Names follow the environment variables a user sets; none of these values is
    ever passed into workflow history except what `RunConfig` copies on purpose.
    """

    model_config = SettingsConfigDict(env_file=".env", extra="ignore", populate_by_name=True)

    temporal_address: str = Field("127.0.0.1:7233", alias="TEMPORAL_ADDRESS")
    temporal_namespace: str = Field("default", alias="TEMPORAL_NAMESPACE")
    temporal_ui_url: str = Field("http://127.0.0.1:8233", alias="LONGRUN_TEMPORAL_UI_URL")
    task_queue: str = Field("longrun", alias="LONGRUN_TASK_QUEUE")
    # How long a stopping worker (SIGTERM) lets activities in flight finish before it
    # cancels them: a rolling deploy should not run a tool twice.
    worker_shutdown_s: float = Field(60.0, alias="LONGRUN_WORKER_SHUTDOWN_S", ge=0)
    # How many runs a worker keeps in memory between their workflow tasks. A run pushed out
    # of the cache costs nothing while it waits; its next task (a signal, a query, an
    # activity's result) replays its history first.
    max_cached_runs: int = Field(1000, alias="LONGRUN_MAX_CACHED_RUNS", ge=0)
    # Workers run as versions of a Temporal Worker Deployment (longrun/versions.py): a run
    # stays on the version it started on and moves to the current one at a hand-over.
    versioning: bool = Field(True, alias="LONGRUN_VERSIONING")
    deployment: str = Field(
        "longrun", alias="LONGRUN_DEPLOYMENT", pattern=r"^[A-Za-z0-9_-]{1,100}$"
    )
    build_id: str | None = Field(
        None,
        alias="LONGRUN_BUILD_ID",
        pattern=BUILD_ID_PATTERN,
        description="this worker's version; unset: the package version and the code's digest",
    )
    # When a worker's version becomes current (new runs start on it): `new`, when the first
    # worker of a version never current before starts; `manual`, when an operator says
    # (`longrun deployment current`), or when the deployment has no current version yet;
    # `start`, whenever one of its workers starts (the dev stack's).
    promote: Literal["new", "manual", "start"] = Field("new", alias="LONGRUN_PROMOTE")

    openai_base_url: str | None = Field(None, alias="OPENAI_BASE_URL")
    openai_api_key: SecretStr | None = Field(None, alias="OPENAI_API_KEY")
    model: str = Field("gpt-4.1-mini", alias="LONGRUN_MODEL")
    prices: dict[str, Price] = Field(
        default_factory=dict,
        alias="LONGRUN_PRICES",
        description='USD per million tokens, JSON: {"gpt-4.1-mini": {"input": 0.4, "output": 1.6}}',
    )
    max_steps: int = Field(40, alias="LONGRUN_MAX_STEPS", ge=1, le=10_000)
    # Child runs one run may start (run steps, for_each items, delegations).
    max_child_runs: int = Field(100, alias="LONGRUN_MAX_CHILD_RUNS", ge=0, le=10_000)
    policy_file: Path | None = Field(None, alias="LONGRUN_POLICY_FILE")
    # MCP servers whose tools runs may call (longrun/mcp_servers.py; TOML or JSON).
    mcp_servers_file: Path | None = Field(None, alias="LONGRUN_MCP_SERVERS")
    budget_defaults: Limits = Field(default_factory=Limits, alias="LONGRUN_BUDGET_DEFAULTS")
    budget_ceilings: Limits = Field(default_factory=Limits, alias="LONGRUN_BUDGET_CEILINGS")
    # How long a model server may stay silent (no token, no byte) before the attempt is
    # given up as "busy"; the whole call is bounded by the activity's own timeout.
    model_timeout_s: float = Field(120.0, alias="LONGRUN_MODEL_TIMEOUT_S", gt=0)
    # How structured answers are asked for; `auto` starts with json_schema and falls back,
    # per model, to what the server accepts (see activities/endpoint.py).
    model_retry_window_s: float = Field(1800.0, alias="LONGRUN_MODEL_RETRY_WINDOW_S", gt=0)
    structured_output: StructuredOutput = Field("auto", alias="LONGRUN_STRUCTURED_OUTPUT")
    # How the actor's tool calls are asked for: `auto` offers the tools ("auto" tool
    # choice) until a model calls them badly, then routes that model's calls (one
    # structured action that longrun turns into the call); `native` never routes,
    # `routed` always does (activities/routing.py).
    tool_choice: Literal["auto", "native", "routed"] = Field("auto", alias="LONGRUN_TOOL_CHOICE")
    # How a goal-only run starts: `plan` asks the planner for steps (a run fails if it
    # gives no valid plan), `direct` works on the goal as one step, `auto` plans and goes
    # direct when no valid plan comes, or at once for a model the worker saw plan badly.
    agent_strategy: Strategy = Field("auto", alias="LONGRUN_AGENT_STRATEGY")
    model_stream: bool = Field(True, alias="LONGRUN_MODEL_STREAM")
    # Keep every model call a run makes (request and answer) as an artifact of the run,
    # for `longrun cassette RUN_ID` (longrun/cassettes.py).
    record_model_calls: bool = Field(False, alias="LONGRUN_RECORD_MODEL_CALLS")
    max_output_tokens: OutputTokens = Field(
        default_factory=OutputTokens, alias="LONGRUN_MAX_OUTPUT_TOKENS"
    )
    context_windows: dict[str, int] = Field(
        default_factory=dict,
        alias="LONGRUN_CONTEXT_WINDOWS",
        description='tokens per model, JSON: {"smollm2-135m": 8192}; else read from the server',
    )

    data_dir: Path = Field(Path(".longrun/data"), alias="LONGRUN_DATA_DIR")
    # Where runs may connect (longrun/destinations.py): host:port entries, comma-separated;
    # none by default. Loopback and private addresses need an entry naming them exactly.
    http_allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, alias="LONGRUN_HTTP_ALLOW_HOSTS"
    )
    # Endpoints runs never reach even when allowed: Temporal's history, matching, membership
    # and metrics ports, say (host:port, host:* for every port of a host).
    denied_destinations: Annotated[list[str], NoDecode] = Field(
        default_factory=list, alias="LONGRUN_DENIED_DESTINATIONS"
    )

    trace_console: bool = Field(False, alias="LONGRUN_TRACE_CONSOLE")
    # host:port where a worker serves Prometheus metrics (/metrics); unset: none.
    metrics_address: str | None = Field(None, alias="LONGRUN_METRICS_ADDRESS")

    secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        alias="LONGRUN_SECRETS",
        description="JSON name -> value; tools name them, only activities read them",
    )
    api_keys: list[ApiKey] = Field(default_factory=list, alias="LONGRUN_API_KEYS")
    approval_timeout_s: float | None = Field(
        None,
        alias="LONGRUN_APPROVAL_TIMEOUT_S",
        gt=0,
        description="how long an approval waits for a person unless its step says; unset: forever",
    )
    approval_on_timeout: Literal["reject", "skip", "fail", "remind", "escalate"] = Field(
        "remind", alias="LONGRUN_APPROVAL_ON_TIMEOUT"
    )
    # Who decides an approval once it has waited its time, with `escalate`.
    approval_escalate_to: Role = Field("admin", alias="LONGRUN_APPROVAL_ESCALATE_TO")
    webhooks: list[str] = Field(
        default_factory=list,
        alias="LONGRUN_WEBHOOKS",
        description="JSON list of URLs every run notifies (besides a run's own webhooks)",
    )
    webhook_secret: SecretStr | None = Field(
        None, alias="LONGRUN_WEBHOOK_SECRET", description="signs every webhook (HMAC-SHA256)"
    )
    four_eyes: bool = Field(False, alias="LONGRUN_FOUR_EYES")

    api_host: str = Field("127.0.0.1", alias="LONGRUN_API_HOST")
    api_port: int = Field(8000, alias="LONGRUN_API_PORT")
    continue_as_new_every: int = Field(500, alias="LONGRUN_CONTINUE_AS_NEW_EVERY", ge=1)
    prompt_token_budget: int = Field(12_000, alias="LONGRUN_PROMPT_TOKEN_BUDGET", ge=1000)
    artifact_threshold_bytes: int = Field(8192, alias="LONGRUN_ARTIFACT_THRESHOLD_BYTES", ge=256)
    # Where big outputs live: files under LONGRUN_DATA_DIR, or an S3-compatible bucket.
    # S3 credentials come from boto3's own chain (AWS_ACCESS_KEY_ID, profiles, roles).
    artifact_store: Literal["local", "s3"] = Field("local", alias="LONGRUN_ARTIFACT_STORE")
    s3_bucket: str | None = Field(None, alias="LONGRUN_S3_BUCKET")
    s3_prefix: str = Field("longrun/", alias="LONGRUN_S3_PREFIX", pattern=r"^(?:[^/]+/)*$")
    s3_endpoint_url: str | None = Field(None, alias="LONGRUN_S3_ENDPOINT_URL")
    s3_region: str | None = Field(None, alias="LONGRUN_S3_REGION")
    artifact_retention_days: float | None = Field(
        None, alias="LONGRUN_ARTIFACT_RETENTION_DAYS", gt=0
    )
    # How process tools (shell, python, commands in checks) run: confined by bubblewrap, or
    # (an operator's explicit choice) unconfined, as the worker's user with its files,
    # environment and network. See activities/tools/sandbox.py.
    sandbox: Literal["bwrap", "unconfined"] = Field("bwrap", alias="LONGRUN_SANDBOX")
    # Bounds of one step's processes together (activities/tools/sandbox.py): their memory
    # (a cgroup, swap off), their number, the size of any file they write, their /tmp (a
    # sized tmpfs), and the run's workspace (every step of the run together).
    sandbox_memory_mb: int = Field(4096, alias="LONGRUN_SANDBOX_MEMORY_MB", ge=64)
    sandbox_processes: int = Field(256, alias="LONGRUN_SANDBOX_PROCESSES", ge=4)
    sandbox_file_mb: int = Field(1024, alias="LONGRUN_SANDBOX_FILE_MB", ge=1)
    sandbox_tmp_mb: int = Field(256, alias="LONGRUN_SANDBOX_TMP_MB", ge=1)
    workspace_mb: int = Field(4096, alias="LONGRUN_WORKSPACE_MB", ge=1)
    # A cgroup (v2) delegated to the worker's user, where it makes each step's group; unset:
    # /sys/fs/cgroup for a root worker.
    sandbox_cgroup: Path | None = Field(None, alias="LONGRUN_SANDBOX_CGROUP")
    # Bounds the operator accepts this worker cannot enforce (`memory`: per-process limits
    # only, no cgroup); any other bound that cannot be enforced refuses process tools.
    sandbox_unenforced: Annotated[list[Literal["memory"]], NoDecode] = Field(
        default_factory=list, alias="LONGRUN_SANDBOX_UNENFORCED"
    )
    max_request_bytes: int = Field(1_048_576, alias="LONGRUN_MAX_REQUEST_BYTES", gt=0)

    # Ports used by `longrun dev` for the local stack.
    dev_temporal_port: int = Field(7233, alias="LONGRUN_DEV_TEMPORAL_PORT")
    dev_ui_port: int = Field(8233, alias="LONGRUN_DEV_UI_PORT")
    dev_standin_port: int = Field(8100, alias="LONGRUN_DEV_STANDIN_PORT")
    dev_worker_metrics_port: int = Field(9464, alias="LONGRUN_DEV_WORKER_METRICS_PORT")

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
