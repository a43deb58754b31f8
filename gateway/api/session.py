"""Sign-in sessions (``/api/session``) and ``/api/me`` (who the caller is).

``POST /api/session`` {username, password} signs in: a new server-side
session each time (a cookie set before is never kept), the ``linectl_session``
cookie (HttpOnly, SameSite=Strict, Path=/, Secure under TLS) and the session's
``csrfToken``, which every state-changing request with the cookie must echo
in ``X-CSRF-Token``. Wrong name, wrong password and a disabled user answer
alike (401 ``INVALID_CREDENTIALS``); five failures for one name within 15
minutes answer 429 ``TOO_MANY_ATTEMPTS`` with ``Retry-After``.
``DELETE /api/session`` ends the session on the server."""

from __future__ import annotations

from flask import g, make_response, request
from marshmallow import Schema, fields, validate

from gateway.api.blueprint import Blueprint
from gateway.api.common import document_errors, reply
from gateway.auth import SESSION_COOKIE, authenticate, current_session, require, same_origin
from gateway.context import gateway_context
from gateway.errors import ApiError
from services.identity.passwords import MAX_PASSWORD_LENGTH
from services.identity.signin import MAX_USER_NAME, InvalidCredentials, TooManyAttempts

blp = Blueprint("session", __name__, description="signing in and out; the caller")


class MeSchema(Schema):
    role = fields.String()
    name = fields.String()


class SignInSchema(Schema):
    username = fields.String(required=True, validate=validate.Length(min=1, max=MAX_USER_NAME))
    password = fields.String(required=True, validate=validate.Length(min=1, max=MAX_PASSWORD_LENGTH),
                             load_only=True)


class UserSchema(Schema):
    name = fields.String()
    displayName = fields.String()
    role = fields.String()
    lines = fields.List(fields.String(), metadata={"description": "the plant's lines the user has now, "
                                                   "in the plant's order (every line when allLines)"})
    allLines = fields.Boolean(metadata={"description": "true: the user is limited to no lines, so has every "
                                        "line, those the plant gains later too"})


class SessionSchema(Schema):
    user = fields.Nested(UserSchema)
    csrfToken = fields.String(metadata={"description": "echo it in X-CSRF-Token on POST, PUT, PATCH, DELETE"})
    expiresAt = fields.String(metadata={"format": "date-time"})


def _user(person) -> dict:
    """The user as the API shows them: ``lines`` the plant's lines they have now (a
    client cannot tell "every line" from "none" by an empty list), ``allLines``
    whether they are limited to none."""
    limited = set(person.lines)
    lines = [line_id for line_id in gateway_context().plant.line_ids if not limited or line_id in limited]
    return {**person.as_json(), "lines": lines, "allLines": not limited}


def _session_body(session) -> dict:
    return {"user": _user(session.person), "csrfToken": session.csrf_token,
            "expiresAt": session.expires_at.isoformat().replace("+00:00", "Z")}


def _secure() -> bool:
    return gateway_context().settings.tls or request.scheme == "https"


@blp.route("/api/session", methods=["POST"])
@blp.arguments(SignInSchema)
@blp.response(200, SessionSchema)
@document_errors(blp, 400, 401, 403, 429)
def sign_in(body):
    """Sign in with a user name and a password (local users, then LDAP)."""
    if not same_origin():  # another site may not sign this browser in (as someone else)
        raise ApiError(403, "FORBIDDEN", "sign in from this site's own page")
    people = gateway_context().people
    try:
        secret, session = people.sign_in.attempt(body["username"], body["password"], request.remote_addr)
    except TooManyAttempts as exc:
        raise ApiError(429, "TOO_MANY_ATTEMPTS", "too many failed sign-ins for this user name; try again later",
                       {"Retry-After": str(exc.retry_after)}) from None
    except InvalidCredentials:
        raise ApiError(401, "INVALID_CREDENTIALS", "wrong user name or password") from None
    response = make_response(reply(_session_body(session)))
    response.set_cookie(SESSION_COOKIE, secret, httponly=True, samesite="Strict", path="/", secure=_secure(),
                        max_age=gateway_context().settings.session_max_hours * 3600)
    response.headers["Cache-Control"] = "no-store"
    return response


@blp.route("/api/session", methods=["GET"])
@blp.response(200, SessionSchema)
@document_errors(blp, 401)
def get_session():
    """The signed-in session of the cookie (401 when it has ended)."""
    session = current_session()
    if session is None:
        raise ApiError(401, "UNAUTHORIZED", "no signed-in session; sign in again")
    return reply(_session_body(session))


@blp.route("/api/session", methods=["DELETE"])
@blp.response(204)
@document_errors(blp, 401, 403)
def sign_out():
    """Sign out: the session ends on the server, the cookie no longer works."""
    if current_session() is None or request.headers.get("Authorization"):
        raise ApiError(401, "UNAUTHORIZED", "no signed-in session")
    authenticate("operator", "platform", "runtime")  # the CSRF check
    gateway_context().people.sign_in.sign_out(g.session, request.remote_addr)
    response = make_response("", 204)
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="Strict", secure=_secure())
    return response


@blp.route("/api/me", methods=["GET"])
@require("operator", "platform", "runtime")
@blp.response(200, MeSchema)
@document_errors(blp, 401)
def get_me():
    return reply({"role": g.role, "name": g.holder})
