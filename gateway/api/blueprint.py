"""The gateway's Blueprint: flask-smorest's, reading bodies with the one
strict JSON reader (``gateway.strict_json``) instead of webargs' plain
``json.loads``. Every area's blueprint is one of these."""

from __future__ import annotations

import flask_smorest
from webargs import core
from webargs.flaskparser import FlaskParser, is_json_request

from gateway import strict_json
from gateway.errors import ApiError


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
