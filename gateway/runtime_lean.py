"""The AI Runtime's four hot requests without Flask: ``POST
/internal/runtime/jobs/poll``, ``…/{id}/lock``, ``…/{id}/heartbeat`` and
``…/{id}/result``.

A fleet of runtimes sends these several times a second each, and each is one
short statement in PostgreSQL; through Flask, flask-smorest, webargs and
marshmallow the gateway spent several times the statement's cost on the
request around it (``tests/bench/profile_runtime_requests.py``). This WSGI
layer in front of the Flask app answers exactly those four (the method and
the path match) and hands everything else to Flask, unchanged.

It keeps the contract the Flask views keep (``gateway.api.runtime``, which
still declares these operations in the OpenAPI document and serves them when
this layer is off): the same edge checks in the same order (body size, path
and query text, the bearer token and its role, the strict JSON reader), the
same checks of each field with marshmallow's wording (``field: why``), the
same queue calls, the same error envelope and statuses (``gateway.errors``
maps every refusal, once, for both), the security headers and the request
metrics. ``tests/gateway/test_runtime_lean.py`` holds the two paths to the
same answers.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from urllib.parse import parse_qsl

import orjson

from gateway import strict_json
from gateway.errors import ApiError, refusal_of
from gateway.headers import MAX_BODY_BYTES, security_headers
from services.ai_jobs.domain import API_KEY_MODES, JOB_TYPES, POLL_LIMIT_MAX, RETRYABLE
from services.ai_jobs.validation import result_rule_broken

PREFIX = "/internal/runtime/jobs/"
TEXT_MAX = 200
ATTEMPT_MAX = 2**31 - 1
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ERROR_CODES = sorted(RETRYABLE)
_MISSING = object()


def _bad(field: str, why: str):
    raise ApiError(400, "VALIDATION_ERROR", f"{field}: {why}")


# -- the fields, as the marshmallow schemas of gateway.api.runtime check them --------


def _text(body, field, *, required=True, lo=1, hi=TEXT_MAX, none_ok=False):
    value = body.get(field, _MISSING)
    if value is _MISSING:
        if required:
            _bad(field, "Missing data for required field.")
        return None
    if value is None:
        if none_ok:
            return None
        _bad(field, "Field may not be null.")
    if not isinstance(value, str):
        _bad(field, "Not a valid string.")
    if not lo <= len(value) <= hi:
        _bad(field, f"Length must be between {lo} and {hi}." if lo else
             f"Longer than maximum length {hi}.")
    return value


def _integer(body, field, lo, hi, default=_MISSING):
    value = body.get(field, _MISSING)
    if value is _MISSING:
        if default is _MISSING:
            _bad(field, "Missing data for required field.")
        return default
    if value is None:
        _bad(field, "Field may not be null.")
    if isinstance(value, bool) or not isinstance(value, int):
        _bad(field, "Not a valid integer.")
    if not lo <= value <= hi:
        _bad(field, f"Must be greater than or equal to {lo} and less than or equal to {hi}.")
    return value


def _one_of(field, value, choices):
    if value not in choices:
        _bad(field, f"Must be one of: {', '.join(choices)}.")
    return value


def _strings_of(field, value, choices, lo, hi):
    if value is None:
        _bad(field, "Field may not be null.")
    if not isinstance(value, list):
        _bad(field, "Not a valid list.")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            _bad(f"{field}.{i}", "Not a valid string.")
        _one_of(f"{field}.{i}", item, choices)
    if not lo <= len(value) <= hi:
        _bad(field, f"Length must be between {lo} and {hi}.")
    return value


def _only(body, fields: tuple[str, ...]):
    if not isinstance(body, dict):
        _bad("body", "Invalid input type.")
    for key in body:
        if key not in fields:
            _bad(key, "Unknown field.")


def _serves(value):
    if value is None:
        _bad("serves", "Field may not be null.")
    if not isinstance(value, list):
        _bad("serves", "Not a valid list.")
    out = []
    for i, entry in enumerate(value):
        if not isinstance(entry, dict):
            _bad(f"serves.{i}", "Invalid input type.")
        provider = _text(entry, "modelProvider", hi=64) if "modelProvider" in entry else _MISSING
        if provider is _MISSING:
            _bad(f"serves.{i}.modelProvider", "Missing data for required field.")
        modes = entry.get("apiKeyModes", _MISSING)
        modes = list(API_KEY_MODES) if modes is _MISSING else _strings_of(
            f"serves.{i}.apiKeyModes", modes, API_KEY_MODES, 1, len(API_KEY_MODES))
        for key in entry:
            if key not in ("modelProvider", "apiKeyModes"):
                _bad(f"serves.{i}.{key}", "Unknown field.")
        out.append({"modelProvider": provider, "apiKeyModes": modes})
    if not 1 <= len(out) <= 16:
        _bad("serves", "Length must be between 1 and 16.")
    return out


# -- the four operations -----------------------------------------------------------------


def poll(queue, body, _job_id):
    fields = ("runtimeInstanceId", "capabilities", "limit", "claim", "serves")
    if not isinstance(body, dict):
        _only(body, fields)
    rid = _text(body, "runtimeInstanceId")
    caps = body.get("capabilities", _MISSING)
    if caps is _MISSING:
        _bad("capabilities", "Missing data for required field.")
    caps = _strings_of("capabilities", caps, JOB_TYPES, 1, len(JOB_TYPES) * 4)
    limit = _integer(body, "limit", 1, POLL_LIMIT_MAX, default=20)
    claim = body.get("claim", False)
    if claim is not True and claim is not False:
        _bad("claim", "Not a valid boolean.")  # a JSON boolean only: "yes" or 1 must not lock jobs
    serves = _serves(body["serves"]) if "serves" in body else None
    _only(body, fields)
    return 200, {"jobs": queue.poll(rid, caps, limit, claim, serves)}


def lock(queue, body, job_id):
    if not isinstance(body, dict):
        _only(body, ("runtimeInstanceId",))
    rid = _text(body, "runtimeInstanceId")
    _only(body, ("runtimeInstanceId",))
    return 200, queue.lock(job_id, rid)


def heartbeat(queue, body, job_id):
    fields = ("runtimeInstanceId", "attemptNo")
    if not isinstance(body, dict):
        _only(body, fields)
    rid = _text(body, "runtimeInstanceId")
    attempt = _integer(body, "attemptNo", 1, ATTEMPT_MAX)
    _only(body, fields)
    queue.heartbeat(job_id, rid, attempt)
    return 204, None


_RESULT_FIELDS = ("runtimeInstanceId", "attemptNo", "status", "output", "outputHash", "errorCode",
                  "errorMessage")


def result(queue, body, job_id):
    if not isinstance(body, dict):
        _only(body, _RESULT_FIELDS)
    rid = _text(body, "runtimeInstanceId")
    attempt = _integer(body, "attemptNo", 1, ATTEMPT_MAX)
    status = body.get("status", _MISSING)
    if status is _MISSING:
        _bad("status", "Missing data for required field.")
    if status is None:
        _bad("status", "Field may not be null.")
    if not isinstance(status, str):
        _bad("status", "Not a valid string.")
    _one_of("status", status, ("succeeded", "failed"))
    if "output" in body and body["output"] is None:
        _bad("output", "Field may not be null.")
    digest = body.get("outputHash")
    if "outputHash" in body:
        if not isinstance(digest, str):
            _bad("outputHash", "Field may not be null." if digest is None else "Not a valid string.")
        if not _HEX64.match(digest):
            _bad("outputHash", "must be 64 lowercase hex digits")
    code = body.get("errorCode")
    if "errorCode" in body:
        if not isinstance(code, str):
            _bad("errorCode", "Field may not be null." if code is None else "Not a valid string.")
        _one_of("errorCode", code, _ERROR_CODES)
    if "errorMessage" in body:
        _text(body, "errorMessage", lo=0, hi=2000, none_ok=True)
    _only(body, _RESULT_FIELDS)
    if broken := result_rule_broken(body):  # the rules between the fields
        _bad(*broken)
    return 200, queue.submit_result(job_id, rid, attempt, status, output=body.get("output"),
                                    output_hash=digest, error_code=code,
                                    error_message=body.get("errorMessage"))


# (the last path segment → the operation, the route as the metrics name it)
_BY_JOB = {
    "lock": (lock, "/internal/runtime/jobs/<job_id>/lock"),
    "heartbeat": (heartbeat, "/internal/runtime/jobs/<job_id>/heartbeat"),
    "result": (result, "/internal/runtime/jobs/<job_id>/result"),
}
_POLL = (poll, "/internal/runtime/jobs/poll")


def _dumps(body) -> bytes:
    try:
        return orjson.dumps(body)  # a tenth of json.dumps' time for a page of jobs
    except (TypeError, orjson.JSONEncodeError):  # what orjson cannot write (an integer beyond 64 bits)
        return json.dumps(body, ensure_ascii=False, default=str).encode("utf-8")


def route(path: str) -> tuple[Callable, str, str | None] | None:
    """(operation, route, job id) for one of the four paths, else None."""
    if not path.startswith(PREFIX):
        return None
    rest = path[len(PREFIX):]
    if rest == "poll":
        return _POLL[0], _POLL[1], None
    job_id, slash, action = rest.partition("/")
    if not slash or not job_id or action not in _BY_JOB:
        return None
    op, rule = _BY_JOB[action]
    return op, rule, job_id


def _is_json(content_type: str) -> bool:
    mimetype = content_type.split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


def _charset(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            return value.strip().strip('"').lower()
    return "utf-8"


class RuntimeLeanPath:
    """WSGI middleware: the four hot runtime POSTs here, all else to ``app``.

    ``context``: the app's GatewayContext (the AI queue, tokens, metrics)."""

    def __init__(self, app, context):
        self.app = app
        self.context = context
        self.enabled = True

    def __call__(self, environ, start_response):
        if not self.enabled or environ.get("REQUEST_METHOD") != "POST":
            return self.app(environ, start_response)
        # As werkzeug reads it: WSGI's latin-1 string of the path's UTF-8 bytes.
        path = environ.get("PATH_INFO", "").encode("latin-1", "replace").decode("utf-8", "replace")
        found = route(path)
        if found is None or _signed_in_without_token(environ):
            return self.app(environ, start_response)
        op, rule, job_id = found
        t0 = time.perf_counter()
        try:
            status, body = self._serve(environ, path, op, job_id)
            headers = []
        except Exception as exc:  # noqa: BLE001 - every refusal, mapped once (gateway.errors)
            status, code, message, extra = refusal_of(exc, path)
            body = {"error": {"code": code, "message": message}}
            headers = list(extra.items())
        payload = b"" if body is None else _dumps(body)
        if body is not None:
            headers.append(("Content-Type", "application/json"))
        headers.append(("Content-Length", str(len(payload))))
        headers.extend(security_headers(environ.get("HTTP_HOST") or environ.get("SERVER_NAME", "")))
        m = self.context.metrics
        if m is not None:
            m.requests.labels("POST", rule, str(status)).inc()
            m.latency.labels("POST", rule).observe(time.perf_counter() - t0)
        start_response(f"{status} {_REASONS.get(status, 'Error')}", headers)
        return [payload]

    def _serve(self, environ, path, op, job_id):
        length = environ.get("CONTENT_LENGTH") or ""
        try:
            length = int(length) if length else None
        except ValueError:
            raise ApiError(400, "VALIDATION_ERROR", "headers: a header is malformed") from None
        if length is not None and length > MAX_BODY_BYTES:
            raise ApiError(413, "PAYLOAD_TOO_LARGE", "request bodies are limited to 1 MiB")
        why = strict_json.bad_text(path)
        if why:
            raise ApiError(400, "VALIDATION_ERROR", f"path: {why}")
        if environ.get("QUERY_STRING"):
            self._check_query(environ["QUERY_STRING"])
        self._authenticate(environ)
        raw = self._body(environ["wsgi.input"], length, environ.get("wsgi.input_terminated", False))
        content_type = environ.get("CONTENT_TYPE", "")
        if not _is_json(content_type):
            body = {}
        else:
            charset = _charset(content_type)
            if charset not in ("utf-8", "utf8"):
                raise ApiError(400, "VALIDATION_ERROR", f"body: charset {charset[:20]} is not UTF-8")
            try:
                body = strict_json.loads(raw)
            except strict_json.StrictJsonError as exc:
                raise ApiError(400, "VALIDATION_ERROR", str(exc)) from None
        return op(self.context.ai, body, job_id)

    @staticmethod
    def _body(stream, length: int | None, terminated: bool) -> bytes:
        """The body as werkzeug reads it: Content-Length bytes, or a chunked body
        to its end (gunicorn marks it terminated), 413 beyond 1 MiB either way."""
        if length is not None:
            return stream.read(length) if length > 0 else b""
        if not terminated:
            return b""
        raw = stream.read(MAX_BODY_BYTES + 1)
        if len(raw) > MAX_BODY_BYTES:
            raise ApiError(413, "PAYLOAD_TOO_LARGE", "request bodies are limited to 1 MiB")
        return raw

    @staticmethod
    def _check_query(query: str) -> None:
        for key, value in parse_qsl(query, keep_blank_values=True, errors="replace"):
            why = strict_json.bad_text(key) or strict_json.bad_text(value)
            if why:
                raise ApiError(400, "VALIDATION_ERROR", f"{key[:40]!s}: {why}")

    def _authenticate(self, environ) -> None:
        """As ``gateway.auth.authenticate("runtime")``: 401 without a known token, 403 for another role."""
        header = environ.get("HTTP_AUTHORIZATION", "")
        token = header[7:].strip() or None if header[:7].lower() == "bearer " else None
        holder = self.context.tokens.holder_for(token)
        if holder is None:
            raise ApiError(401, "UNAUTHORIZED", "a valid bearer token or a signed-in session is required",
                           {"WWW-Authenticate": 'Bearer realm="linectl"'})
        if holder.role not in ("runtime", "admin"):
            raise ApiError(403, "FORBIDDEN", "this needs the runtime role")


def _signed_in_without_token(environ) -> bool:
    """A sign-in session's cookie and no bearer token: ``gateway.auth`` decides
    (the session, its CSRF token), so the request takes the full app's path."""
    return "HTTP_AUTHORIZATION" not in environ and "linectl_session=" in environ.get("HTTP_COOKIE", "")


_REASONS = {200: "OK", 204: "No Content", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
            404: "Not Found", 409: "Conflict", 413: "Request Entity Too Large", 422: "Unprocessable Entity",
            500: "Internal Server Error", 503: "Service Unavailable"}
