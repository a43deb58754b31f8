"""What the AI blueprints share: strict schemas and the process's AI job
queue (``services.ai_jobs``), served straight from PostgreSQL. Its refusals
(:class:`AiJobError`) become HTTP errors in ``gateway.errors``, once."""

from __future__ import annotations

from marshmallow import Schema, ValidationError, fields, validate

from gateway.context import gateway_context
from services.ai_jobs.queue import AiJobQueue

TEXT = validate.Length(min=1, max=200)


class Strict(Schema):
    """Unknown fields are an error (marshmallow's default, said out loud)."""

    class Meta:
        unknown = "raise"


class NoteIn(Strict):
    """Command endpoints accept no body, ``{}`` or an optional note."""

    note = fields.String(validate=validate.Length(max=200))


class JsonBoolean(fields.Boolean):
    """A JSON ``true``/``false`` only: ``"yes"``, ``"true"`` or ``1`` are refused
    (marshmallow's Boolean takes them, and ``1 in {True}`` holds in Python)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if value is True or value is False:
            return value
        raise self.make_error("invalid")


def not_null(value):
    if value is None:
        raise ValidationError("Field may not be null.")


def ai_queue() -> AiJobQueue:
    return gateway_context().ai
