"""What the AI blueprints share: calling the line_controller's ``ai_*`` RPCs
and turning their refusals (``{"error": {"code", "message"}}``) into HTTP
errors with the status the AI contract names; reading with the read-only DB."""

from __future__ import annotations

from contextlib import contextmanager

from flask import current_app
from marshmallow import Schema, ValidationError, fields, validate

from gateway.errors import ApiError
from services.line_controller.ai_jobs.domain import HTTP_STATUS, AiJobError

TEXT = validate.Length(min=1, max=200)


class Strict(Schema):
    """Unknown fields are an error (marshmallow's default, said out loud)."""

    class Meta:
        unknown = "raise"


class NoteIn(Strict):
    """Command endpoints accept no body, ``{}`` or an optional note."""

    note = fields.String(validate=validate.Length(max=200))


def not_null(value):
    if value is None:
        raise ValidationError("Field may not be null.")


def call_ai(method: str, **kwargs):
    ctx = current_app.extensions["linectl"]
    with ctx.rpc_pool().client() as rpc:
        reply = getattr(rpc.line_controller, method)(**kwargs)
    if isinstance(reply, dict) and set(reply) == {"error"}:
        code = reply["error"].get("code", "CONFLICT")
        raise ApiError(HTTP_STATUS.get(code, 409), code, reply["error"].get("message", code))
    return reply


@contextmanager
def reading():
    """A read-only session; a domain refusal becomes its HTTP error."""
    session = current_app.extensions["linectl"].db()
    try:
        yield session
    except AiJobError as exc:
        raise ApiError(HTTP_STATUS.get(exc.code, 409), exc.code, exc.message) from None
    finally:
        session.rollback()
        session.close()
