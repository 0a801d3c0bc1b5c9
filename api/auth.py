"""Who is calling: API keys (stored as SHA-256 hashes in settings) and their roles.

A key has roles (`viewer`, `submitter`, `approver`, `admin`), may belong to a tenant, and is
granted secrets apart from its roles: a key's runs may use only the secrets the key lists.
What each may do to which resource is api/access.py's to decide. With no keys configured the
API answers loopback clients only, each as a local admin who may use every secret.
"""

from __future__ import annotations

import hmac
import ipaddress
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from pydantic import BaseModel

from api.deps import SettingsDep
from longrun.contracts import Role
from longrun.settings import Settings, hash_key


class Principal(BaseModel):
    """An authenticated caller."""

    name: str
    roles: frozenset[Role]
    secrets: frozenset[str] = frozenset()
    tenant: str | None = None

    def as_owner(self) -> dict[str, Any]:
        """What a run this caller starts records of it: its owner and the secrets it may
        use (the grant its every tool call carries)."""
        return {"owner": self.name, "secrets": sorted(self.secrets), "tenant": self.tenant}

    def ungranted(self, names: list[str]) -> list[str]:
        """The secrets among `names` this caller's runs may not name."""
        return [] if "*" in self.secrets else [n for n in names if n not in self.secrets]

    def check_granted(self, names: list[str]) -> None:
        """403 unless this caller's runs may name every secret in `names`."""
        ungranted = self.ungranted(names)
        if ungranted:
            raise HTTPException(
                403, f"the API key '{self.name}' is not granted the secrets {', '.join(ungranted)}"
            )


PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-forwarded-host", "x-real-ip", "via")


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def _foreign_page(request: Request) -> str | None:
    """Why a request to a keyless API may have come from a page of another site, or None.
    A browser on this machine sends a page's requests from a loopback address too: a name
    that resolves to 127.0.0.1 (DNS rebinding) shows in `Host`, a page of another origin in
    `Origin` or `Sec-Fetch-Site`."""
    host = request.headers.get("host", "")
    name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    if name.lower() not in LOOPBACK_HOSTS:
        return f"this API answers only loopback host names, not '{host}'"
    origin = request.headers.get("origin")
    if origin is not None and origin.lower() not in (f"http://{host}", f"https://{host}"):
        return f"this API answers only its own pages, not a page of '{origin}'"
    if request.headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        return "this API answers only its own pages, not another site's"
    return None


async def authenticate(request: Request, settings: SettingsDep) -> Principal:
    """The caller, from `Authorization: Bearer <key>`; 401 without a valid key. (Async, as
    every dependency here: FastAPI runs a plain `def` one in a worker thread, a hop that cost
    more than the check.)"""
    return principal_of(request, settings)


def principal_of(request: Request, settings: Settings) -> Principal:
    """The caller of `request`; HTTPException 401 or 403 when the API does not admit it."""
    if not settings.api_keys:
        host = request.client.host if request.client else None
        # A proxy on this host makes every caller look local: a request that says it came
        # through one is not taken as local (a proxy that says nothing cannot be told).
        proxied = [name for name in PROXY_HEADERS if name in request.headers]
        if not _is_loopback(host) or proxied:
            raise HTTPException(
                403,
                "no API keys are configured, so this API answers loopback clients only"
                + (
                    f" (this request came through a proxy: {', '.join(proxied)})" if proxied else ""
                ),
            )
        refusal = _foreign_page(request)
        if refusal is not None:
            raise HTTPException(403, f"no API keys are configured, so {refusal}")
        return Principal(name="local", roles=frozenset({"admin"}), secrets=frozenset({"*"}))
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and token:
        digest = hash_key(token.strip())
        for key in settings.api_keys:
            if hmac.compare_digest(digest, key.sha256):
                return Principal(
                    name=key.name,
                    roles=frozenset(key.roles),
                    secrets=frozenset(key.secrets),
                    tenant=key.tenant,
                )
    raise HTTPException(401, "a valid API key is required", headers={"WWW-Authenticate": "Bearer"})


Caller = Annotated[Principal, Depends(authenticate)]
