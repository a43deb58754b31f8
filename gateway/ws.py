"""``GET /ws?line=<lineId>&after=<seq>``: a line's event log as a websocket
stream; without ``line``, the default line's. Each line has its own gapless
``seq``, its own relay and its own hub (``gateway.lines``).

Frames are ``{seq, txId, type, at, payload, lineId}`` (``shared.serialize.event_frame``).
A client subscribes to the relay *before* reading the backlog from
``event_log``, so every event is either in the backlog or in its live queue;
frames are sent strictly in seq order (``seq <= last`` is dropped as a
duplicate, a jump is filled from the database first), so the switch from
backlog to live has no gap and no duplicate. Without ``after`` the stream
starts at the newest event.

The route holds no thread while a stream is open: flask-sock does the
handshake on the request thread, then the connection is handed to the
process's :class:`gateway.stream_hub.StreamHub`, which serves every stream
from one thread (see there for the limits: per-process cap, client message
size, send timeout, queue bound). A client that falls behind gets
``{"type": "overflow", "resumeAfter": seq}`` and is closed (1013); it
reconnects with ``?after=<resumeAfter>``. A client resuming from a seq that
retention has purged first gets ``{"type": "gap", "from": first missing, "to":
last missing}``. Beyond the cap, the handshake is refused with 503 at once.
A stream whose token is revoked (``gateway.tokens``) is closed with 4401
``token revoked`` within about a second.
permessage-deflate is never negotiated: an inflated frame has no size bound
before it is inflated.
"""

from __future__ import annotations

import base64
import binascii
import os
import socket

from flask import Blueprint, g, request
from flask_sock import Sock

from gateway.auth import authenticate
from gateway.context import gateway_context
from gateway.errors import ApiError
from gateway.event_log import newest_seq
from gateway.schemas import MAX_ID

bp = Blueprint("ws", __name__)
sock = Sock()


@bp.before_request
def _check_request():
    # Runs before the upgrade, so a refusal is a plain HTTP error with the envelope.
    ctx = gateway_context()
    named = request.args.get("line")
    g.line_id = ctx.default_line.id if named is None else named  # a user limited to other lines: 403
    authenticate("operator")
    _check_upgrade(request.headers)
    line = ctx.lines.get(g.line_id)
    if line is None:
        raise ApiError(400, "VALIDATION_ERROR", f"line: no line {named[:64]!r} in this plant")
    g.line = line
    raw = request.args.get("after")
    if raw is not None and (not (raw.isascii() and raw.isdigit()) or int(raw) > MAX_ID):
        raise ApiError(400, "VALIDATION_ERROR", "after: must be a non-negative integer seq")
    line.event_relay()  # 503 while the line's live feed is not connected
    hub = line.stream_hub()
    if not hub.reserve():
        raise ApiError(503, "UNAVAILABLE", f"this gateway process serves {hub.limits.max_clients}"
                       " streams already; try again later or another gateway")
    g.ws_slot = hub
    # "From now" is fixed before the handshake, so nothing after it is missed.
    with line.db() as session:
        newest = newest_seq(session)
    if raw is None:
        g.ws_after = newest
    elif int(raw) > newest:
        # No client saw a seq the log does not have (events are published after
        # they commit): this one resumes from another database or a typo.
        raise ApiError(400, "VALIDATION_ERROR", f"after: beyond the newest event ({newest})")
    else:
        g.ws_after = int(raw)
    # No permessage-deflate: simple-websocket would accept it, and a compressed
    # frame is inflated with no bound before any size check.
    request.environ.pop("HTTP_SEC_WEBSOCKET_EXTENSIONS", None)


def _check_upgrade(headers) -> None:
    """What wsproto would refuse with an exception (a 500), refused here with a 400."""
    if "websocket" not in headers.get("Upgrade", "").lower():
        raise ApiError(400, "VALIDATION_ERROR", "GET /ws is a websocket: Upgrade: websocket is required")
    if headers.get("Sec-WebSocket-Version", "").strip() != "13":
        raise ApiError(400, "VALIDATION_ERROR", "Sec-WebSocket-Version: only 13 is spoken",
                       headers={"Sec-WebSocket-Version": "13"})
    try:
        key_ok = len(base64.b64decode(headers.get("Sec-WebSocket-Key", ""), validate=True)) == 16
    except (ValueError, binascii.Error):
        key_ok = False
    if not key_ok:
        raise ApiError(400, "VALIDATION_ERROR", "Sec-WebSocket-Key: 16 bytes in base64 are required")


@bp.teardown_request
def _release_slot(_exc):
    hub = g.pop("ws_slot", None)
    if hub is not None:
        hub.release()  # refused or failed before the hub adopted the stream


class HubReadsTheSocket:
    """simple-websocket's reader-thread slot, left empty: the StreamHub reads
    every stream's socket, so no thread is started per connection."""

    name = "stream-hub"

    def __init__(self, target=None, **_kwargs):
        pass

    def start(self) -> None:
        pass


@sock.route("/ws", bp=bp)
def stream(ws):
    hub = g.pop("ws_slot")
    # Take the connection from the server. gunicorn half-closes and closes the
    # socket it holds when this returns, so that fd is pointed at an unconnected
    # socket (its shutdown fails quietly, its close closes only that), and the
    # hub keeps a duplicate of the connection. gunicorn's own bookkeeping (its
    # connection count) sees an ordinary closed connection.
    held = ws.sock
    own = held.dup()
    with socket.socket(held.family, held.type) as placeholder:
        os.dup2(placeholder.fileno(), held.fileno())
    hub.adopt(own, ws.ws, g.ws_after, g.token_key)  # closed (4401) when the token is revoked
    ws.connected = False  # flask-sock's close() is then a no-op: the hub owns the stream


def init_app(app) -> None:
    app.config.setdefault("SOCK_SERVER_OPTIONS", {"thread_class": HubReadsTheSocket})
    app.register_blueprint(bp)
