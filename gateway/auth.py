"""Who is calling, decided once, at the edge: a bearer token or a sign-in
session becomes an actor with a role (operator, platform, runtime, admin).

Tokens come from settings (``LINECTL_TOKENS``, or a tokens file the process
re-reads when it changes: ``gateway.tokens``). They are compared in constant
time against every configured token and never logged. A request without a
bearer token may carry the ``linectl_session`` cookie (``/api/session``);
one that changes state (POST, PUT, PATCH, DELETE) must then carry
``X-CSRF-Token`` equal to its session's, else 403 ``CSRF_TOKEN_INVALID``.
``admin`` may do everything. 401 ``UNAUTHORIZED`` without a valid token or
session, 403 ``FORBIDDEN`` for the wrong role.
"""

from __future__ import annotations

import functools
import hmac
from urllib.parse import urlsplit

from flask import g, request

from gateway.context import gateway_context
from gateway.errors import ApiError
from gateway.lines import LinePort
from gateway.tokens import token_key
from services.identity.watch import session_credential
from shared.events import ACTOR_NOTE_SEPARATOR

SESSION_COOKIE = "linectl_session"
CSRF_HEADER = "X-CSRF-Token"
STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


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


def _unauthorized(message: str = "a valid bearer token or a signed-in session is required"):
    return ApiError(401, "UNAUTHORIZED", message, {"WWW-Authenticate": 'Bearer realm="linectl"'})


def current_session():
    """The request's live sign-in session (touched), or None; kept on ``g``."""
    if "session" not in g:
        secret = request.cookies.get(SESSION_COOKIE)
        g.session = gateway_context().people.sessions.resume(secret) if secret else None
    return g.session


def same_origin() -> bool:
    """No Origin (not a browser's cross-site request), or this site's own."""
    origin = request.headers.get("Origin")
    return origin is None or urlsplit(origin).netloc == request.host


def _check_lines(session) -> None:
    """A user limited to lines may use only those lines' paths and streams. A
    request about a line names it in ``g.line_id`` before it is authenticated
    (``gateway.api.blueprint`` for the line-control paths, bare ones included;
    ``/ws`` for its ``?line=``); the plant's own views filter by
    :func:`may_see_line` instead."""
    lines = session.person.lines
    line_id = g.get("line_id")
    if lines and line_id is not None and line_id not in lines:
        raise ApiError(403, "FORBIDDEN", f"{session.person.name} is limited to the lines {', '.join(lines)}")


def may_see_line(line_id: str) -> bool:
    """Whether the authenticated caller may see the line: a token, or a user with
    no lines, sees every line."""
    lines = g.get("lines") or ()
    return not lines or line_id in lines


def visible_lines() -> list[LinePort]:
    """The plant's lines the caller may see (:func:`may_see_line`), the default line first."""
    return [line for line in gateway_context().lines.values() if may_see_line(line.id)]


def _caller() -> tuple[str, str, bytes]:
    """(role, name, credential) of a bearer token, else of the session cookie."""
    token = _token_from_request()
    if token is not None or SESSION_COOKIE not in request.cookies:
        holder = holder_for(token)
        if holder is None:
            raise _unauthorized()
        return holder.role, holder.name, token_key(token)  # the key: what a websocket keeps
    session = current_session()
    if session is None:
        raise _unauthorized("your session has ended; sign in again")
    if request.method in STATE_CHANGING and not hmac.compare_digest(
            request.headers.get(CSRF_HEADER, "").encode(), session.csrf_token.encode()):
        raise ApiError(403, "CSRF_TOKEN_INVALID", f"{CSRF_HEADER} must be this session's csrfToken")
    if request.path == "/ws" and not same_origin():  # a cross-site page may not borrow the cookie
        raise ApiError(403, "FORBIDDEN", "a websocket with the session cookie must come from this site")
    _check_lines(session)
    g.lines = session.person.lines
    return session.person.role, session.person.name, session_credential(session.key)


def authenticate(*roles: str) -> str:
    """The caller's role; raises 401/403 unless it is one of ``roles`` or admin.
    ``g.actor`` is the person signed in, else the token's holder (its name, else
    its role): what audit rows record. A self-asserted ``X-Actor`` rides along
    as a note, never as the actor."""
    role, name, credential = _caller()
    if role != "admin" and role not in roles:
        raise ApiError(403, "FORBIDDEN", f"this needs the {' or '.join(roles) or 'admin'} role")
    g.role = role
    g.holder = name
    g.token_key = credential
    note = _note(request.headers.get("X-Actor", ""))
    g.actor = f"{name}{ACTOR_NOTE_SEPARATOR}{note}" if note else name
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
