"""Bearer-token auth with roles (operator, platform, runtime, admin).

Tokens come from settings (``LINECTL_TOKENS``). They are compared in constant
time against every configured token and never logged. ``admin`` may do
everything. 401 ``UNAUTHORIZED`` without a valid token, 403 ``FORBIDDEN`` for a
valid token of the wrong role.
"""

from __future__ import annotations

import functools
import hmac

from flask import current_app, g, request

from gateway.errors import ApiError


def _token_from_request() -> str | None:
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip() or None
    if request.path == "/ws":  # browsers cannot set headers on a websocket
        return request.args.get("token") or None
    return None


def role_for(token: str | None) -> str | None:
    if not token:
        return None
    found = None
    for known, role in current_app.extensions["linectl"].settings.tokens.items():
        # No early exit: the time taken does not depend on which token matched.
        if hmac.compare_digest(known.encode(), token.encode()):
            found = role
    return found


def authenticate(*roles: str) -> str:
    """The caller's role; raises 401/403 unless it is one of ``roles`` or admin."""
    role = role_for(_token_from_request())
    if role is None:
        raise ApiError(401, "UNAUTHORIZED", "a valid bearer token is required",
                       {"WWW-Authenticate": 'Bearer realm="linectl"'})
    if role != "admin" and role not in roles:
        raise ApiError(403, "FORBIDDEN", f"this needs the {' or '.join(roles) or 'admin'} role")
    g.role = role
    g.actor = f"{role}:{request.headers.get('X-Actor', '')[:100]}".rstrip(":")
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
