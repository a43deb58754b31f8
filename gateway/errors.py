"""The error envelope: every error is ``{"error": {"code", "message"}}``.

Views raise :class:`ApiError` (or call :func:`fail`); werkzeug's HTTP errors
and webargs' validation errors are translated here, so bad input never turns
into a 5xx and every response has the same shape. What gunicorn refuses
before the app sees it (a request line or headers beyond its limits, a
malformed request) gets the same envelope from ``gateway.edge_worker``.
"""

from __future__ import annotations

import logging

import psycopg2.errors
from flask import jsonify, request
from gunicorn.http import errors as gunicorn_http
from sqlalchemy.exc import DataError, DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from werkzeug.exceptions import HTTPException

from services.ai_jobs.domain import HTTP_STATUS as AI_HTTP_STATUS
from services.ai_jobs.domain import AiJobError

log = logging.getLogger(__name__)

_CODES = {
    400: "VALIDATION_ERROR",
    401: "UNAUTHORIZED",
    403: "FORBIDDEN",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "CONFLICT",
    413: "PAYLOAD_TOO_LARGE",
    414: "URI_TOO_LONG",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "VALIDATION_ERROR",
    429: "TOO_MANY_REQUESTS",
    431: "HEADERS_TOO_LARGE",
    503: "UNAVAILABLE",
    504: "TIMEOUT",
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


def fail(status: int, code: str, message: str):
    raise ApiError(status, code, message)


def envelope(code: str, message: str) -> dict:
    """The one shape of every error body (also written by ``gateway.edge_worker``)."""
    return {"error": {"code": code, "message": message}}


def error_response(status: int, code: str, message: str, headers: dict | None = None):
    resp = jsonify(envelope(code, message))
    resp.status_code = status
    for k, v in (headers or {}).items():
        resp.headers[k] = v
    return resp


def _first_field_error(messages, path=()) -> tuple[str, str]:
    """webargs' nested ``{location: {field: [msg]}}`` → ("field", "msg")."""
    if isinstance(messages, dict):
        for key, value in messages.items():
            if key in ("json", "query", "form", "view_args", "path", "headers", "querystring"):
                return _first_field_error(value, path)
            return _first_field_error(value, path + (str(key),))
    if isinstance(messages, list) and messages:
        first = messages[0]
        if isinstance(first, (dict, list)):
            return _first_field_error(first, path)
        return ".".join(path) or "body", str(first)
    return ".".join(path) or "body", str(messages)


def handle_http_exception(error: HTTPException):
    status = error.code or 500
    data = getattr(error, "data", None) or {}
    if status == 422 or (status == 400 and "messages" in data):
        field, msg = _first_field_error(data.get("messages") or data.get("errors") or {})
        if field == "_schema":
            field = "body"
        return error_response(400, "VALIDATION_ERROR", f"{field}: {msg}")
    code = data.get("code") or _CODES.get(status, "ERROR")
    message = data.get("message") or error.description or error.name
    if status == 400 and "JSON" in str(message):
        message = "body: the request body is not valid JSON"
    if status >= 500:
        log.error("HTTP %s: %s", status, message)
    return error_response(status, code, message, data.get("headers"))


# The bounds gunicorn reads a request within (its defaults, named because they
# are the gateway's contract at the edge, docs/operations.md): the request
# line, the header count, one header's size.
REQUEST_LIMITS = {
    "limit_request_line": 4094,
    "limit_request_fields": 100,
    "limit_request_field_size": 8190,
}

# What gunicorn's parser refuses, in the order checked:
# (what it raised, status, reason phrase, code, message).
_REQUEST_REFUSALS = (
    (gunicorn_http.LimitRequestLine, 414, "URI Too Long", "URI_TOO_LONG",
     f"request line: longer than {REQUEST_LIMITS['limit_request_line']} bytes"),
    (gunicorn_http.LimitRequestHeaders, 431, "Request Header Fields Too Large", "HEADERS_TOO_LARGE",
     f"headers: more than {REQUEST_LIMITS['limit_request_fields']} fields, or one longer than"
     f" {REQUEST_LIMITS['limit_request_field_size']} bytes"),
    (gunicorn_http.UnsupportedTransferCoding, 501, "Not Implemented", "NOT_IMPLEMENTED",
     "Transfer-Encoding: only chunked is supported"),
    (gunicorn_http.ExpectationFailed, 417, "Expectation Failed", "EXPECTATION_FAILED",
     "Expect: only 100-continue is supported"),
    (gunicorn_http.ForbiddenProxyRequest, 403, "Forbidden", "FORBIDDEN",
     "proxy headers from an untrusted address"),
    ((gunicorn_http.InvalidRequestLine, gunicorn_http.InvalidRequestMethod, gunicorn_http.InvalidHTTPVersion),
     400, "Bad Request", "VALIDATION_ERROR", "request line: not a valid HTTP/1.x request line"),
    ((gunicorn_http.InvalidHeader, gunicorn_http.InvalidHeaderName, gunicorn_http.ObsoleteFolding,
      gunicorn_http.InvalidSchemeHeaders), 400, "Bad Request", "VALIDATION_ERROR", "headers: a header is malformed"),
    ((gunicorn_http.InvalidChunkSize, gunicorn_http.ChunkMissingTerminator, gunicorn_http.InvalidChunkExtension),
     400, "Bad Request", "VALIDATION_ERROR", "body: malformed chunked encoding"),
    ((gunicorn_http.InvalidProxyLine, gunicorn_http.InvalidH2CPreface), 400, "Bad Request", "VALIDATION_ERROR",
     "request: not a valid HTTP/1.x request"),
)
# Raised while writing the app's response, or by gunicorn's settings: the server's fault.
_SERVER_FAULTS = (gunicorn_http.InvalidResponseHeader, gunicorn_http.InvalidResponseHeaderName,
                  gunicorn_http.ConfigurationProblem)


def request_refusal(exc: BaseException) -> tuple[int, str, str, str] | None:
    """(status, reason phrase, code, message) for a request gunicorn's parser
    refused, or None when ``exc`` is not the client's fault."""
    if isinstance(exc, _SERVER_FAULTS):
        return None
    for kinds, status, reason, code, message in _REQUEST_REFUSALS:
        if isinstance(exc, kinds):
            return status, reason, code, message
    return None


def refusal_of(error: Exception, path: str = "") -> tuple[int, str, str, dict]:
    """(status, code, message, headers) of any error a request raised: the one
    mapping of refusals to HTTP, for the Flask handlers below and for the
    runtime's lean path (``gateway.runtime_lean``) alike."""
    if isinstance(error, ApiError):
        return error.status, error.code, error.message, error.headers
    if isinstance(error, AiJobError):
        # The AI queue's refusals, mapped to the status its contract names (here only).
        return AI_HTTP_STATUS.get(error.code, 409), error.code, error.message, {}
    if isinstance(error, OperationalError):
        if isinstance(error.orig, psycopg2.errors.QueryCanceled):
            log.warning("a read ran into the statement timeout: %s", path)
            return 503, "UNAVAILABLE", ("the database took too long to answer; "
                                        "try again shortly, or ask for a shorter window"), {}
        log.warning("database unavailable: %s", type(error.orig).__name__ if error.orig else error)
        return 503, "UNAVAILABLE", "the database is unreachable; try again shortly", {}
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        # a disconnect of another kind: the server was demoted in a failover
        log.warning("database connection lost: %s", type(error.orig).__name__ if error.orig else error)
        return 503, "UNAVAILABLE", "the database is failing over; try again shortly", {}
    if isinstance(error, PoolTimeout):
        log.warning("database pool exhausted: %s", error)
        return 503, "UNAVAILABLE", "the gateway is at its database capacity; try again shortly", {}
    if isinstance(error, gunicorn_http.ParseException):
        # gunicorn's parser failing while a view reads the body (a malformed chunk).
        refused = request_refusal(error)
        if refused is not None:
            status, _reason, code, message = refused
            log.info("unreadable request body: %s", type(error).__name__)
            return status, code, message, {}
    # What a malformed request can make a parser or driver raise, however it got
    # past the edge's checks: the request is bad, not the server (logged loudly,
    # since it means a check is missing).
    if isinstance(error, _MALFORMED):
        log.error("a malformed request got past validation: %r", error, exc_info=error)
        return 400, "VALIDATION_ERROR", "body: the request could not be read", {}
    log.error("unhandled error", exc_info=error)
    return 500, "INTERNAL", "internal error; see the gateway log", {}


_MALFORMED = (ValueError, TypeError, UnicodeError, RecursionError, OverflowError, LookupError, DataError)


def handle_refusal(error: Exception):
    """Every error but werkzeug's HTTP errors: :func:`refusal_of`, as a response."""
    return error_response(*refusal_of(error, request.path))


def register(app, api=None) -> None:
    app.register_error_handler(HTTPException, handle_http_exception)
    app.register_error_handler(Exception, handle_refusal)
    if api is not None:
        # flask-smorest registers its own HTTPException handler; ours wins.
        api.handle_http_exception = handle_http_exception
