"""Bearer-token auth with roles (operator, platform, runtime, admin).

Tokens come from settings (``LINECTL_TOKENS``, or a tokens file the process
re-reads when it changes: ``gateway.tokens``). They are compared in constant
time against every configured token and never logged. ``admin`` may do
everything. 401 ``UNAUTHORIZED`` without a valid token, 403 ``FORBIDDEN`` for a
valid token of the wrong role.
"""

from __future__ import annotations

import functools

from flask import g, request

from gateway.context import gateway_context
from gateway.errors import ApiError
from gateway.tokens import token_key
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
    return gateway_context().tokens.holder_for(token)


def _note(raw: str) -> str:
    """X-Actor, as a free-text note only: printable, one line, at most 100 characters."""
    return "".join(c for c in raw if c.isprintable() and c != ACTOR_NOTE_SEPARATOR)[:100].strip()


def authenticate(*roles: str) -> str:
    """The caller's role; raises 401/403 unless it is one of ``roles`` or admin.
    ``g.actor`` is the token's holder (its name, else its role): what audit rows
    record. A self-asserted ``X-Actor`` rides along as a note, never as the actor."""
    token = _token_from_request()
    holder = holder_for(token)
    if holder is None:
        raise ApiError(401, "UNAUTHORIZED", "a valid bearer token is required",
                       {"WWW-Authenticate": 'Bearer realm="linectl"'})
    role = holder.role
    if role != "admin" and role not in roles:
        raise ApiError(403, "FORBIDDEN", f"this needs the {' or '.join(roles) or 'admin'} role")
    g.role = role
    g.holder = holder.name
    g.token_key = token_key(token)  # what a websocket keeps, to be closed when the token is revoked
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
