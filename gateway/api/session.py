"""``/api/me``: who the token belongs to, so the page shows what the role may use."""

from __future__ import annotations

from flask import g
from marshmallow import Schema, fields

from gateway.api.blueprint import Blueprint
from gateway.api.common import document_errors, reply
from gateway.auth import require

blp = Blueprint("session", __name__, description="the caller's token")


class MeSchema(Schema):
    role = fields.String()
    name = fields.String()


@blp.route("/api/me", methods=["GET"])
@require("operator", "platform", "runtime")
@blp.response(200, MeSchema)
@document_errors(blp, 401)
def get_me():
    return reply({"role": g.role, "name": g.holder})
