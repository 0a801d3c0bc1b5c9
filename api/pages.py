"""Page tokens of run listings: Temporal's own token, checked before it is sent back.

Temporal takes seconds to refuse a token it did not issue and then answers with an
internal error, so the API wraps each token with a check of the token and of the listing
it belongs to: garbage, or a token of another listing, is a 422 at once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

_VERSION = b"\x01"
_CHECK_BYTES = 8


def _check(query: str, raw: bytes) -> bytes:
    return hashlib.sha256(query.encode() + b"\x00" + raw).digest()[:_CHECK_BYTES]


def wrap_token(query: str, raw: bytes) -> str:
    """The token a client sends back for the page after this one."""
    return base64.urlsafe_b64encode(_VERSION + _check(query, raw) + raw).decode()


def unwrap_token(query: str, token: str) -> bytes | None:
    """Temporal's token inside a client's, or None if the token is not one this listing
    gave out."""
    try:
        data = base64.b64decode(token, altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        return None
    head, raw = data[: 1 + _CHECK_BYTES], data[1 + _CHECK_BYTES :]
    if head != _VERSION + _check(query, raw) or not raw:
        return None
    return raw
