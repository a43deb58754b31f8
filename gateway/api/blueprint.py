"""The gateway's Blueprint: flask-smorest's, reading bodies with the one
strict JSON reader (``gateway.strict_json``) instead of webargs' plain
``json.loads``. Every area's blueprint is one of these.

A line-control area is a :class:`LineBlueprint`: its rules are relative, and
:func:`register_line_area` registers it twice, at ``/api`` (the default
line's paths) and at ``/api/lines/<lineId>`` (any line's). Which line a
request is about is decided once, before its view: ``g.line`` (a
:class:`~gateway.lines.LinePort`), 404 ``NOT_FOUND`` for a line the plant
does not have."""

from __future__ import annotations

from copy import deepcopy

import flask_smorest
from flask import g
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from gateway import schemas, strict_json
from gateway.context import gateway_context
from gateway.errors import ApiError
from shared.plant import LINE_ID

LINE_PREFIX = "/api/lines/<lineId>"
LINE_PARAMETER = {"in": "path", "name": "lineId", "required": True,
                  "description": "the line (its layout's line.id); the unprefixed paths are the default line's",
                  "schema": {"type": "string", "pattern": LINE_ID.pattern}}


class StrictParser(FlaskParser):
    def _raw_load_json(self, req):
        if not is_json_request(req):
            return core.missing
        charset = req.mimetype_params.get("charset", "utf-8").lower()
        if charset not in ("utf-8", "utf8"):
            raise ApiError(400, "VALIDATION_ERROR", f"body: charset {charset[:20]} is not UTF-8")
        try:
            return strict_json.loads(req.get_data(cache=True))
        except strict_json.StrictJsonError as exc:
            raise ApiError(400, "VALIDATION_ERROR", str(exc)) from None


class Blueprint(flask_smorest.Blueprint):
    ARGUMENTS_PARSER = StrictParser()


def _line_of_request(_endpoint, values) -> None:
    # Before every view of a line area (both registrations): the path's line, else the default.
    line_id = values.pop("lineId", None) if values else None
    ctx = gateway_context()
    g.line = ctx.default_line if line_id is None else ctx.line(line_id)
    g.line_id = g.line.id  # what gateway.auth checks a user's lines against


class LineBlueprint(Blueprint):
    """A line-control area: rules relative to ``/api`` or ``/api/lines/<lineId>``."""

    def __init__(self, name: str, import_name: str, **kwargs):
        super().__init__(name, import_name, url_prefix="/api", **kwargs)
        self.url_value_preprocessor(_line_of_request)

    def register_views_in_doc(self, api, app, spec, *, name, parameters):
        if not parameters:
            return super().register_views_in_doc(api, app, spec, name=name, parameters=parameters)
        # Under /api/lines/{lineId} every operation may also answer 404 (an unknown line).
        own = self._docs
        self._docs = _with_unknown_line(own)
        try:
            return super().register_views_in_doc(api, app, spec, name=name, parameters=parameters)
        finally:
            self._docs = own


def _with_unknown_line(docs: dict) -> dict:
    docs = deepcopy(docs)
    not_found = {"schema": schemas.ErrorSchema(), "description": "error", "content_type": None}
    for endpoint in docs.values():
        for method, operation in endpoint.items():
            if method != "parameters":
                responses = operation.setdefault("response", {}).setdefault("responses", {})
                responses.setdefault(404, [dict(not_found)])
    return docs


def register_line_area(api, blp: LineBlueprint) -> None:
    """``blp`` at ``/api`` (the default line) and at ``/api/lines/<lineId>``."""
    api.register_blueprint(blp)
    api.register_blueprint(blp, url_prefix=LINE_PREFIX, name=f"{blp.name}_of_line", parameters=[LINE_PARAMETER])
