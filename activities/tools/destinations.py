"""Where runs may send requests: the hosts of LONGRUN_HTTP_ALLOW_HOSTS, never longrun's own
services. `http_request`, webhooks and the sandbox's proxy all ask here."""

from __future__ import annotations

import httpx

from longrun.settings import Settings


def port_of(url: httpx.URL) -> int:
    """The port a request to `url` goes to."""
    return url.port or (443 if url.scheme == "https" else 80)


def destination_refusal(settings: Settings, url: httpx.URL) -> str | None:
    """Why a run may not send a request to `url` (a host off the allow-list, or one of
    longrun's own services), or None."""
    host = (url.host or "").lower()
    port = port_of(url)
    # An entry is a host (any port) or host:port ([v6]:port for IPv6 addresses).
    pair = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    allowed = settings.http_allow_hosts
    if host not in allowed and pair not in allowed:
        return f"'{pair}' is not allowed; allowed: {', '.join(allowed)} (LONGRUN_HTTP_ALLOW_HOSTS)"
    own = settings.own_services().get(pair)
    if own is not None:
        return f"'{pair}' is {own}, one of longrun's own services, which runs never call"
    return None
