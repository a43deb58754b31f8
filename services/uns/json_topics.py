"""Plain JSON topics as a format of the publisher port (``LINECTL_MQTT_FORMAT``
``json`` or ``both``), for a host that speaks no Sparkplug.

* ``<prefix>/<line>/<device>/<metric>``, retained: ``{"value", "at", "seq"}``,
  the metric's current value (``at``: when it took it, ISO-8601 UTC; ``seq``: the
  event-log seq that value includes). The node's own metrics are under the
  device ``Line`` (``<prefix>/cell-a/Line/Completed``).
* ``<prefix>/<line>/events``: every event frame of the line's log, in seq order
  (QoS 1, not retained), also the backlog after an interruption, which touches
  no retained topic: an old value never overwrites a live one.

No command is taken on these topics (the format subscribes to none)."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from services.uns.model import BD_SEQ, EVENT_SEQ, LAST_PIECE, NODE, REBIRTH, Change, FinishedPiece, LineModel, millis
from services.uns.port import Command, Message, NodeView

_NOT_PUBLISHED = (BD_SEQ, REBIRTH)  # Sparkplug's session metrics mean nothing here


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


PIECE_FINISHED = "PieceFinished"


def piece_frame(line_id: str, piece: FinishedPiece) -> dict:
    """A finished piece on the events topic: right after the ``JobFinished`` that ended it,
    with that event's seq, txId and time; the payload is its record's summary
    with its steps (as ``GET /api/pieces/{serial}`` has them)."""
    f = piece.frame
    return {"seq": f["seq"], "txId": f["txId"], "type": PIECE_FINISHED, "at": f["at"], "payload": piece.summary,
            "lineId": line_id}


class JsonTopics:
    name = "json"

    def __init__(self, prefix: str):
        self.prefix = prefix

    def state_topic(self, node: NodeView, device: str, name: str) -> str:
        if device == NODE:
            return f"{self.prefix}/{node.line_id}/{name}"  # node metrics are named Line/…
        return f"{self.prefix}/{node.line_id}/{device}/{name}"

    def _state(self, node: NodeView, device: str, name: str, value, at: int, seq: int) -> Message:
        body = json.dumps({"value": value, "at": _iso(at), "seq": seq}).encode()
        return Message(self.state_topic(node, device, name), body, qos=1, retain=True)

    def will(self, node: NodeView) -> Message | None:
        return None

    def death(self, node: NodeView) -> list[Message]:
        return []

    def subscriptions(self, node: NodeView) -> list[str]:
        return []

    def birth(self, node: NodeView, model: LineModel, live_devices: list[str]) -> list[Message]:
        return [self._state(node, d, n, value, model.at, model.seq) for (d, n), value in model.values.items()
                if n not in _NOT_PUBLISHED]

    def device_birth(self, node: NodeView, model: LineModel, device: str) -> list[Message]:
        return []

    def device_death(self, node: NodeView, device: str, at: int) -> list[Message]:
        return []

    def transaction(self, node: NodeView, frames: list[dict], changes: list[Change], *, historical: bool,
                    dead_devices: frozenset[str], pieces: list[FinishedPiece] = ()) -> list[Message]:
        events = f"{self.prefix}/{node.line_id}/events"
        ended = {p.frame["seq"]: p for p in pieces}
        out = []
        for frame in frames:
            out.append(Message(events, json.dumps({**frame, "lineId": node.line_id}).encode(), qos=1))
            if frame["seq"] in ended:  # the piece's summary right after the event that finished it
                out.append(Message(events, json.dumps(piece_frame(node.line_id, ended[frame["seq"]])).encode(), qos=1))
        if historical:
            return out
        seq, at = frames[-1]["seq"], millis(frames[-1]["at"])
        out.append(self._state(node, NODE, EVENT_SEQ, seq, at, seq))
        if pieces:
            last = pieces[-1]
            out.append(self._state(node, NODE, LAST_PIECE, last.summary, millis(last.frame["at"]), seq))
        return out + [self._state(node, c.device, c.name, c.value, c.at, seq) for c in changes
                      if c.name not in _NOT_PUBLISHED]

    def values(self, node: NodeView, changes: list[Change], *, at: int, dead_devices: frozenset[str]) -> list[Message]:
        seq = node.model.seq
        return [self._state(node, c.device, c.name, c.value, c.at, seq) for c in changes
                if c.name not in _NOT_PUBLISHED]

    def command(self, node: NodeView, topic: str, payload: bytes) -> Command | None:
        return None
