"""``GET /ws?after=<seq>``: the event log as a websocket stream.

Frames are ``{seq, txId, type, at, payload}`` (``shared.serialize.event_frame``).
A client subscribes to the relay *before* reading the backlog from
``event_log``, so every event is either in the backlog or in its live queue;
frames are sent strictly in seq order (``seq <= last`` is dropped as a
duplicate, a jump is filled from the database first), so the switch from
backlog to live has no gap and no duplicate. Without ``after`` the stream
starts at the newest event.

A client whose bounded queue fills up (it reads too slowly) gets
``{"type": "overflow", "resumeAfter": seq}`` and is closed; it reconnects
with ``?after=<resumeAfter>``. A client resuming from a seq that retention has
purged first gets ``{"type": "gap", "from": first missing, "to": last missing}``.
The server pings every ``PING_SECONDS``.
"""

from __future__ import annotations

import json
import queue

from flask import Blueprint, g, request
from flask_sock import Sock
from sqlalchemy import func, select

from gateway.auth import authenticate
from gateway.errors import ApiError
from gateway.relay import RESYNC
from gateway.schemas import MAX_ID
from shared import serialize
from shared.db.models import EventLog

QUEUE_SIZE = 1000
BACKLOG_PAGE = 500
PING_SECONDS = 20
CLOSE_TRY_AGAIN_LATER = 1013

bp = Blueprint("ws", __name__)
sock = Sock()


def _context():
    from flask import current_app

    return current_app.extensions["linectl"]


@bp.before_request
def _check_request():
    # Runs before the upgrade, so a refusal is a plain HTTP error with the envelope.
    authenticate("operator")
    raw = request.args.get("after")
    if raw is None:
        # "From now": fixed before the handshake, so nothing after it is missed.
        with _context().db() as session:
            g.ws_after = session.scalar(select(func.coalesce(func.max(EventLog.seq), 0)))
    else:
        if not raw.isdigit() or int(raw) > MAX_ID:
            raise ApiError(400, "VALIDATION_ERROR", "after: must be a non-negative integer seq")
        g.ws_after = int(raw)
    g.ws_relay = _context().event_relay()


def gap_before(first_seq: int, last: int) -> dict | None:
    """The events a client missed between ``last`` and the first one the log still
    has: seq is gapless, so a jump means retention purged them."""
    if first_seq > last + 1:
        return {"from": last + 1, "to": first_seq - 1}
    return None


def _send_from_log(ws, db, last: int, upto: int | None = None) -> int:
    """Send logged events with ``last < seq (<= upto)`` in order; the new last seq.
    Events already purged are announced by one ``gap`` control frame."""
    while True:
        stmt = select(EventLog.__table__).where(EventLog.seq > last).order_by(EventLog.seq).limit(BACKLOG_PAGE)
        if upto is not None:
            stmt = stmt.where(EventLog.seq <= upto)
        with db() as session:
            frames = [serialize.event_frame(r) for r in session.execute(stmt)]
        if frames and (gap := gap_before(frames[0]["seq"], last)):
            ws.send(json.dumps({"type": "gap", **gap}))
        for frame in frames:
            ws.send(json.dumps(frame))
            last = frame["seq"]
        if len(frames) < BACKLOG_PAGE:
            return last


@sock.route("/ws", bp=bp)
def stream(ws):
    ctx = _context()
    sub = g.ws_relay.subscribe(QUEUE_SIZE)
    ctx.metrics.ws_clients.inc()
    try:
        last = _send_from_log(ws, ctx.db, g.ws_after)
        while ws.connected:
            if sub.overflowed:
                ws.send(json.dumps({"type": "overflow", "resumeAfter": last}))
                ws.close(reason=CLOSE_TRY_AGAIN_LATER, message="too far behind; resume with ?after=")
                return
            try:
                item = sub.queue.get(timeout=1.0)
            except queue.Empty:
                continue
            if item is RESYNC:
                last = _send_from_log(ws, ctx.db, last)
                continue
            seq = item["seq"]
            if seq <= last:
                continue  # already sent from the backlog
            if seq > last + 1:
                last = _send_from_log(ws, ctx.db, last, upto=seq - 1)
            ws.send(json.dumps(item))
            last = seq
    finally:
        g.ws_relay.unsubscribe(sub)
        ctx.metrics.ws_clients.dec()


def init_app(app) -> None:
    app.config.setdefault("SOCK_SERVER_OPTIONS", {"ping_interval": PING_SECONDS})
    app.register_blueprint(bp)
