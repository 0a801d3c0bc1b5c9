"""How longrun connects to Temporal: TLS and API keys come from Temporal's own client
configuration, as the `temporal` CLI reads it."""

from __future__ import annotations

import pytest

from longrun.dev.stack import TemporalDevServer
from longrun.settings import Settings
from longrun.temporal import connect


async def test_tls_settings_reach_the_connection(
    settings: Settings, temporal_server: TemporalDevServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = await connect(settings)
    assert client.namespace == settings.temporal_namespace
    # The dev server speaks plaintext: a client told to use TLS cannot talk to it.
    monkeypatch.setenv("TEMPORAL_TLS", "true")
    with pytest.raises(RuntimeError):
        await connect(settings)
    # An API key is sent as a bearer token, which the dev server ignores (a key turns TLS
    # on unless told otherwise, as a hosted Temporal needs).
    monkeypatch.setenv("TEMPORAL_TLS", "false")
    monkeypatch.setenv("TEMPORAL_API_KEY", "k-123")
    keyed = await connect(settings)
    assert keyed.service_client.config.api_key == "k-123"
