"""What every line-control blueprint shares: the request's line's read-only
session, keyset pagination, id guards, and sending a command to that line's
line_controller loop. Every object these views answer names its line
(``lineId``): a request is about one line (``gateway.context.current_line``)."""

from __future__ import annotations

import hashlib
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime

from flask import g, jsonify, request
from sqlalchemy import select

from gateway import schemas
from gateway.auth import require
from gateway.context import current_line
from gateway.errors import ApiError
from gateway.rpc import TransportLost
from shared.production_stats import DEFAULT_WINDOW, MAX_WINDOW, Window

# Commands' rejection codes from the loop → HTTP status (a FAILED command is the
# server's fault, not the client's: 503, in run_command).
_REJECTION_STATUS = {"INVALID_TRANSITION": 409, "NOT_FOUND": 404, "VALIDATION_ERROR": 400,
                     "IDEMPOTENCY_KEY_REUSED": 409, "EQUIPMENT_FAULTED": 409}
IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_IDEMPOTENCY_KEY = 200

# Error responses a command endpoint documents (schemathesis checks them).
COMMAND_ERRORS = (400, 401, 403, 404, 409, 503)
QUERY_ERRORS = (400, 401, 403)


@contextmanager
def read_session():
    """A read-only session on the request's line's tables."""
    with current_line().db() as session:
        yield session


def of_line(obj: dict) -> dict:
    """An object of the request's line, as the API shows it: naming its line."""
    return current_line().of_line(obj)


def document_errors(blp, *statuses):
    """Document the error envelope for ``statuses`` on a view."""

    def wrap(view):
        for status in statuses:
            view = blp.alt_response(status, schema=schemas.ErrorSchema, description="error")(view)
        return view

    return wrap


def query_view(blp, rule: str, args_schema, response_schema, *errors: int):
    """Decorator: an operator's ``GET rule`` with query ``args_schema``, answering
    ``response_schema`` and documenting ``errors`` (default ``QUERY_ERRORS``)."""

    def wrap(view):
        view = document_errors(blp, *(errors or QUERY_ERRORS))(view)
        view = blp.response(200, response_schema)(view)
        if args_schema is not None:
            view = blp.arguments(args_schema, location="query")(view)
        return blp.route(rule, methods=["GET"])(require("operator")(view))

    return wrap


def command_view(blp, rule: str, body_schema, response_schema, *, required: bool = True):
    """Decorator: an operator's ``POST rule`` with a ``body_schema`` body that sends a
    command to the loop: ``response_schema`` on 200, 202 when the loop did not answer
    in time, and ``COMMAND_ERRORS``."""

    def wrap(view):
        view = document_errors(blp, *COMMAND_ERRORS)(view)
        view = blp.alt_response(202, schema=schemas.AcceptedSchema,
                                description="the loop did not answer in time")(view)
        view = blp.response(200, response_schema)(view)
        view = blp.arguments(body_schema, required=required)(view)
        return blp.route(rule, methods=["POST"])(require("operator")(view))

    return wrap


def reply(data, status: int = 200):
    """A JSON response built from ``shared.serialize`` output as is.

    The views' marshmallow response schemas document these shapes (and the
    schemathesis test holds the two together); dumping every object through
    them again would only cost time."""
    resp = jsonify(data)
    resp.status_code = status
    return resp


def check_id(value: int, what: str) -> int:
    if not 1 <= value <= schemas.MAX_ID:
        raise ApiError(404, "NOT_FOUND", f"{what} {value} not found")
    return value


def get_or_404(model, key, what: str, serializer):
    if isinstance(key, int):
        check_id(key, what)
    table = model.__table__
    (pk,) = table.primary_key.columns
    with read_session() as session:
        row = session.execute(select(table).where(pk == key)).first()
    if row is None:
        raise ApiError(404, "NOT_FOUND", f"{what} {key} not found")
    return reply(of_line(serializer(row)))


def parse_statuses(raw: str | None, allowed: tuple[str, ...], name: str = "status") -> list[str] | None:
    """``?status=A,B`` → ["A", "B"], each one of ``allowed`` (400 otherwise)."""
    if raw is None:
        return None
    values = [v.strip().upper() for v in raw.split(",") if v.strip()]
    bad = [v for v in values if v not in allowed]
    if bad or not values:
        raise ApiError(400, "VALIDATION_ERROR",
                       f"{name}: must be one or more of {', '.join(allowed)} (comma-separated)")
    return values


def status_filter(column, raw: str | None, allowed: tuple[str, ...], name: str = "status") -> list:
    """``column IN (?status=…)`` as a one-item filter list, or none without the parameter."""
    values = parse_statuses(raw, allowed, name)
    return [column.in_(values)] if values else []


def parse_instant(name: str, raw: str | None) -> datetime | None:
    """A query's ISO-8601 instant, in UTC; one without an offset is UTC."""
    if raw is None:
        return None
    try:
        when = datetime.fromisoformat(raw.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ApiError(400, "VALIDATION_ERROR", f"{name}: not an ISO-8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        when = when.astimezone(UTC)
    except OverflowError:
        raise ApiError(400, "VALIDATION_ERROR", f"{name}: out of range") from None
    if not 1970 <= when.year <= 9998:
        raise ApiError(400, "VALIDATION_ERROR", f"{name}: out of range")
    return when


def window_of(args: dict) -> Window:
    """``from``/``to``: ``to`` defaults to now, ``from`` to 8 hours before ``to``;
    from before to, at most 31 days: the cost of a request is bounded by its window."""
    now = datetime.now(UTC)
    end = parse_instant("to", args.get("to"))
    start = parse_instant("from", args.get("from_"))
    if end is None:
        end = now
    if start is None:
        start = end - DEFAULT_WINDOW
    if start >= end:
        raise ApiError(400, "VALIDATION_ERROR", "from: must be before to")
    if end - start > MAX_WINDOW:
        raise ApiError(400, "VALIDATION_ERROR", f"to: the window is at most {MAX_WINDOW.days} days")
    return Window(start, end, now)


def page(model, key_column, args: dict, serializer, *filters) -> dict:
    """Keyset pagination in ascending key order: stable under inserts.

    ``nextCursor`` is the last key of a full page (opaque to clients). Rows
    are read with Core (no ORM identity map): serialize takes any row."""
    limit = args["limit"]
    stmt = select(model.__table__).where(*filters).order_by(key_column).limit(limit)
    if args.get("cursor"):
        cursor = int(args["cursor"])
        if cursor > schemas.MAX_ID:
            raise ApiError(400, "VALIDATION_ERROR", "cursor: not a cursor")
        stmt = stmt.where(key_column > cursor)
    with read_session() as session:
        rows = session.execute(stmt).all()
    line = current_line()
    items = [line.of_line(serializer(r)) for r in rows]
    next_cursor = str(getattr(rows[-1], key_column.key)) if len(rows) == limit else None
    return reply({"items": items, "nextCursor": next_cursor})


def idempotent_command_id() -> str | None:
    """The command id an ``Idempotency-Key`` header names, scoped to the token's
    holder (two clients' keys never collide), or None without the header. The
    loop de-duplicates by command id, so a repeat is answered from its record
    for as long as retention keeps it (``LINECTL_RETENTION_EVENT_DAYS``)."""
    key = request.headers.get(IDEMPOTENCY_HEADER)
    if key is None:
        return None
    if not key.strip() or len(key) > MAX_IDEMPOTENCY_KEY or not key.isprintable():
        raise ApiError(400, "VALIDATION_ERROR",
                       f"{IDEMPOTENCY_HEADER}: 1..{MAX_IDEMPOTENCY_KEY} printable characters")
    line = current_line()
    # Command ids are unique across the plant: another line's key is another command.
    scope = f"{g.holder}\0{key}" if line.default else f"{g.holder}\0{line.id}\0{key}"
    digest = hashlib.sha256(scope.encode()).hexdigest()
    return f"idem-{digest[:48]}"


def run_command(command_type: str, payload: dict, *, ok_status: int = 200, command_id: str | None = None):
    """Send a command to the request's line's loop and translate its outcome into HTTP.

    HANDLED → ``result`` with ``ok_status`` (200 when it is the recorded outcome
    of an earlier request with this ``command_id``); QUEUED (the wait timed out)
    → 202 ``{"commandId"}``; REJECTED → 409/404/400 with the loop's code and
    message; FAILED (the loop's database failed) → 503. The line's
    line_controller unreachable → 503 (raised by the RPC pool): another line's
    is never asked, nor waited for."""
    line = current_line()
    g.command = (command_type, payload)  # its audit row: gateway.api.audit.audit_command
    # A replay of an id made here is this request's own first attempt (retried
    # below), not an earlier request: it still answers ``ok_status``.
    caller_named_id = command_id is not None
    command_id = command_id or uuid.uuid4().hex
    controller = line.names.line_controller
    line.service_watch().require_running(controller)  # else the call only waits out its timeout
    for attempt in (1, 2):
        try:
            with line.rpc_pool().client() as rpc:
                outcome = getattr(rpc, controller).command(
                    command_type, payload, g.actor,
                    command_id=command_id, wait_seconds=line.settings.command_wait_seconds,
                )
            break
        except TransportLost:
            # A pooled client's connection died (the broker or database restarted).
            # Once more on a fresh client with the same id: the loop runs it once.
            if attempt == 2:
                raise
    status = outcome.get("status")
    if status == "HANDLED":
        replayed = caller_named_id and outcome.get("replayed")
        result = outcome.get("result") or {}
        if isinstance(result, dict) and "id" in result:  # an object of the line (not a summary)
            result = line.of_line(result)
        return reply(result, 200 if replayed else ok_status)
    if status == "QUEUED":
        return reply(line.of_line({"commandId": outcome.get("commandId") or command_id}), 202)
    error = outcome.get("error") or {}
    code = error.get("code") or "INVALID_TRANSITION"
    if status == "FAILED" or code == "INTERNAL":
        raise ApiError(503, "UNAVAILABLE", "the line controller could not complete the command; "
                       f"see GET {line.api_root}/commands/{command_id} before retrying")
    raise ApiError(_REJECTION_STATUS.get(code, 409), code, error.get("message") or code)
