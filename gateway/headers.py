"""The security headers every response carries, Flask's and the runtime's lean
path's alike: the page must not be framed (clickjacking of "Confirm
recovery"), run no inline or foreign script, and leak nothing in the Referer."""

from __future__ import annotations

from functools import lru_cache

MAX_BODY_BYTES = 1024 * 1024  # the contract's 1 MiB; 413 beyond


def content_security_policy(host: str) -> str:
    host = "".join(c for c in host if c.isalnum() or c in ".-:[]")  # never echo a header verbatim
    return ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
            f" connect-src 'self' ws://{host} wss://{host}; frame-ancestors 'none'; base-uri 'none';"
            " form-action 'self'; object-src 'none'")


@lru_cache(maxsize=64)
def _security_headers(host: str) -> tuple[tuple[str, str], ...]:
    return (("Content-Security-Policy", content_security_policy(host)),
            ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
            ("X-Frame-Options", "DENY"))


def security_headers(host: str) -> tuple[tuple[str, str], ...]:
    # Made once per Host (a handful of them; beyond 64, recomputed: still right).
    return _security_headers(host[:200])
