"""Bearer-token auth with roles (operator, platform, runtime, admin).

Tokens come from settings (``LINECTL_TOKENS``). They are compared in constant
time against every configured token and never logged. ``admin`` may do
everything. 401 ``UNAUTHORIZED`` without a valid token, 403 ``FORBIDDEN`` for a
valid token of the wrong role.
"""

from __future__ import annotations

import functools
import hmac

from flask import g, request

from gateway.context import gateway_context
from gateway.errors import ApiError
from shared.events import ACTOR_NOTE_SEPARATOR


def _token_from_request() -> str | None:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    if request.path == "/ws":  # browsers cannot set headers on a websocket
        return request.args.get("token") or None
    return None


def holder_for(token: str | None):
    """The token's :class:`~shared.config.TokenHolder`, or None."""
    if not token:
        return None
    found = None
    for known, holder in gateway_context().settings.tokens.items():
        # No early exit: the time taken does not depend on which token matched.
        if hmac.compare_digest(known.encode(), token.encode()):
            found = holder
    return found


def _note(raw: str) -> str:
    """X-Actor, as a free-text note only: printable, one line, at most 100 characters."""
    return "".join(c for c in raw if c.isprintable() and c != ACTOR_NOTE_SEPARATOR)[:100].strip()


def authenticate(*roles: str) -> str:
    """The caller's role; raises 401/403 unless it is one of ``roles`` or admin.
    ``g.actor`` is the token's holder (its name, else its role): what audit rows
    record. A self-asserted ``X-Actor`` rides along as a note, never as the actor."""
    holder = holder_for(_token_from_request())
    if holder is None:
        raise ApiError(401, "UNAUTHORIZED", "a valid bearer token is required",
                       {"WWW-Authenticate": 'Bearer realm="linectl"'})
    role = holder.role
    if role != "admin" and role not in roles:
        raise ApiError(403, "FORBIDDEN", f"this needs the {' or '.join(roles) or 'admin'} role")
    g.role = role
    g.holder = holder.name
    note = _note(request.headers.get("X-Actor", ""))
    g.actor = f"{holder.name}{ACTOR_NOTE_SEPARATOR}{note}" if note else holder.name
    return role


def require(*roles: str):
    """Decorator: the view needs one of ``roles`` (admin always passes)."""

    def wrap(view):
        @functools.wraps(view)
        def inner(*args, **kwargs):
            authenticate(*roles)
            return view(*args, **kwargs)

        return inner

    return wrap
