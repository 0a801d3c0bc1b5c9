"""The production stack (docker-compose.yml) is valid compose, stops without its secrets, and
configures longrun only with settings longrun reads, every required one set."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from longrun.settings import Settings
from longrun.telemetry import OTLP_VARIABLES

ROOT = Path(__file__).parent.parent
SECRETS = {"POSTGRES_PASSWORD": "pw", "OPENAI_API_KEY": "sk", "LONGRUN_API_KEYS": "[]"}
# What longrun's processes read besides their Settings: OpenTelemetry's exporter, and
# Temporal's client configuration (longrun/temporal.py).
READ_ELSEWHERE = {
    *OTLP_VARIABLES,
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CA",
    "TEMPORAL_TLS_CERT",
    "TEMPORAL_TLS_KEY",
    "TEMPORAL_TLS_SERVER_NAME",
    "TEMPORAL_API_KEY",
    "TEMPORAL_CONFIG_FILE",
    "TEMPORAL_PROFILE",
}
# What a deployment cannot do without: where Temporal is, the model's key, who may call.
REQUIRED = {"TEMPORAL_ADDRESS", "OPENAI_API_KEY", "LONGRUN_API_KEYS", "LONGRUN_TASK_QUEUE"}


def _compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose (Debian's package) is needed: make installs it"
    clean = {k: v for k, v in os.environ.items() if k not in SECRETS}
    return subprocess.run(
        [binary, "-f", str(ROOT / "docker-compose.yml"), *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def stack() -> dict[str, Any]:
    rendered = _compose("config", env=SECRETS)
    assert rendered.returncode == 0, rendered.stderr
    config: dict[str, Any] = yaml.safe_load(rendered.stdout)
    return config


def test_the_stack_is_valid_compose_with_current_images(stack: dict[str, Any]) -> None:
    services = stack["services"]
    assert {"postgresql", "temporal-schema", "temporal", "temporal-ui", "api", "worker"} <= set(
        services
    )
    assert {"otel-collector", "jaeger"} <= set(services)
    images = [s.get("image", "") for s in services.values()]
    assert not [i for i in images if "auto-setup" in i], "temporalio/auto-setup is deprecated"
    assert all(":" in i and not i.endswith(":latest") for i in images if i), images
    assert services["temporal"]["image"].startswith("temporalio/server:")
    assert services["temporal-schema"]["image"].startswith("temporalio/admin-tools:")
    schema_done = services["temporal"]["depends_on"]["temporal-schema"]["condition"]
    assert schema_done == "service_completed_successfully"
    # Whoever reaches Temporal's frontend can signal any run past longrun's keys and roles.
    assert "ports" not in services["temporal"]
    assert services["temporal-ui"]["environment"]["TEMPORAL_DISABLE_WRITE_ACTIONS"] == "true"
    for name in ("postgresql", "temporal", "api", "worker", "jaeger"):
        assert "healthcheck" in services[name], f"{name} has no healthcheck"
    for name, service in services.items():
        for port in service.get("ports", []):
            published = port if isinstance(port, str) else port.get("host_ip", "")
            assert name == "api" or "127.0.0.1" in str(published), f"{name} publishes {port}"
    for script in ("setup-schema.sh", "create-namespace.sh"):
        assert (ROOT / "deploy" / "temporal" / script).is_file()


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_the_stack_stops_without_a_required_secret(missing: str) -> None:
    rendered = _compose("config", env={k: v for k, v in SECRETS.items() if k != missing})
    assert rendered.returncode != 0
    assert missing in rendered.stderr


@pytest.mark.parametrize("service", ["api", "worker"])
def test_longrun_services_set_only_settings_longrun_reads(
    stack: dict[str, Any], service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = stack["services"][service]["environment"]
    known = {f.alias for f in Settings.model_fields.values() if f.alias} | READ_ELSEWHERE
    assert set(env) - known == set(), "set in docker-compose.yml, read by nobody"
    assert REQUIRED - set(env) == set(), "required, not set"
    # What compose gives longrun, its settings accept, as the process would read them.
    for name in known:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        if value not in (None, ""):
            monkeypatch.setenv(name, str(value))
    settings = Settings(_env_file=None)
    assert settings.temporal_address == "temporal:7233"
