"""Sparkplug B 3.0 (Eclipse Sparkplug 3.0.0) as a format of the publisher port.

Topics: ``spBv1.0/<group>/<NBIRTH|NDATA|NDEATH|NCMD>/<line>`` and
``spBv1.0/<group>/<DBIRTH|DDATA|DDEATH|DCMD>/<line>/<device>``. Payloads are the
Tahu schema's ``Payload`` (``services.uns.proto``).

* The Will is the NDEATH with the session's ``bdSeq``; NBIRTH carries the same
  ``bdSeq``, ``seq`` 0, and every node metric with name, alias, type and value;
  one DBIRTH per living device follows (seq 1, 2, …).
* NDATA / DDATA carry metrics by alias only, timestamped with the loop
  transaction's time. ``Line/EventSeq`` appears once per event of the
  transaction (each with its event's time), so a host sees every seq.
  Historical transactions (the backlog) set ``is_historical`` on every metric.
* NCMD ``Node Control/Rebirth`` = true asks for births; any other NCMD and
  every DCMD is refused (nothing on the floor is commanded over MQTT).
"""

from __future__ import annotations

import json
import time

from google.protobuf.message import DecodeError

from services.uns.model import (
    BD_SEQ,
    EVENT_SEQ,
    INT64,
    LAST_PIECE,
    NODE,
    REBIRTH,
    UINT64,
    Change,
    FinishedPiece,
    LineModel,
    millis,
)
from services.uns.port import Command, Message, NodeView
from services.uns.proto import sparkplug_b_pb2 as pb

NAMESPACE = "spBv1.0"
MAX_COMMAND_BYTES = 64 * 1024  # a Rebirth is a few dozen bytes; more is not a command we take


def now_ms() -> int:
    return int(time.time() * 1000)


def topic(group: str, kind: str, node: str, device: str | None = None) -> str:
    return "/".join([NAMESPACE, group, kind, node] + ([device] if device else []))


def _set_value(metric, datatype: int, value) -> None:
    metric.datatype = datatype
    if value is None:
        metric.is_null = True
    elif datatype == pb.Boolean:
        metric.boolean_value = bool(value)
    elif datatype == pb.String:
        # a structured value (Line/LastPiece) as compact JSON
        metric.string_value = json.dumps(value, separators=(",", ":"), ensure_ascii=False) \
            if isinstance(value, dict | list) else str(value)
    elif datatype == pb.Double:
        metric.double_value = float(value)
    elif datatype == INT64:
        metric.long_value = int(value) & 0xFFFFFFFFFFFFFFFF  # two's complement, as the spec stores Int64
    else:
        metric.long_value = int(value)


class Sparkplug:
    name = "sparkplug"

    def _payload(self, node: NodeView, *, birth: bool = False, timestamp: int | None = None) -> pb.Payload:
        return pb.Payload(timestamp=timestamp or now_ms(), seq=node.first_seq() if birth else node.next_seq())

    def _death(self, node: NodeView) -> bytes:
        payload = pb.Payload(timestamp=now_ms())  # an NDEATH has no seq
        metric = payload.metrics.add(name=BD_SEQ, timestamp=payload.timestamp)
        _set_value(metric, INT64, node.bd_seq)
        return payload.SerializeToString()

    def will(self, node: NodeView) -> Message:
        return Message(topic(node.group, "NDEATH", node.line_id), self._death(node), qos=1, retain=False)

    def death(self, node: NodeView) -> list[Message]:
        return [self.will(node)]

    def subscriptions(self, node: NodeView) -> list[str]:
        return [topic(node.group, "NCMD", node.line_id), topic(node.group, "DCMD", node.line_id, "+")]

    def birth(self, node: NodeView, model: LineModel, live_devices: list[str]) -> list[Message]:
        payload = self._payload(node, birth=True, timestamp=model.at or now_ms())
        catalog = model.catalog
        for name in catalog.of_device(NODE):
            metric = payload.metrics.add(name=name, alias=catalog.aliases[(NODE, name)], timestamp=payload.timestamp)
            value = node.bd_seq if name == BD_SEQ else model.values.get((NODE, name))
            _set_value(metric, catalog.types[(NODE, name)], value)
        out = [Message(topic(node.group, "NBIRTH", node.line_id), payload.SerializeToString())]
        return out + [m for device in live_devices for m in self.device_birth(node, model, device)]

    def device_birth(self, node: NodeView, model: LineModel, device: str) -> list[Message]:
        payload = self._payload(node)
        catalog = model.catalog
        for name in catalog.of_device(device):
            metric = payload.metrics.add(name=name, alias=catalog.aliases[(device, name)],
                                         timestamp=payload.timestamp)
            _set_value(metric, catalog.types[(device, name)], model.values.get((device, name)))
        return [Message(topic(node.group, "DBIRTH", node.line_id, device), payload.SerializeToString())]

    def device_death(self, node: NodeView, device: str, at: int) -> list[Message]:
        payload = self._payload(node, timestamp=at or now_ms())
        return [Message(topic(node.group, "DDEATH", node.line_id, device), payload.SerializeToString())]

    def transaction(self, node: NodeView, frames: list[dict], changes: list[Change], *, historical: bool,
                    dead_devices: frozenset[str], pieces: list[FinishedPiece] = ()) -> list[Message]:
        """NDATA (every event's ``Line/EventSeq``, a ``Line/LastPiece`` per piece
        finished, then the node's changes), then a DDATA per living device that changed."""
        events = [Change(NODE, EVENT_SEQ, frame["seq"], millis(frame["at"])) for frame in frames]
        events += [Change(NODE, LAST_PIECE, p.summary, millis(p.frame["at"])) for p in pieces]
        return self._data(node, events, changes, millis(frames[-1]["at"]), historical, dead_devices)

    def values(self, node: NodeView, changes: list[Change], *, at: int, dead_devices: frozenset[str]) -> list[Message]:
        """Changes no event carries (the controller seen to come or go): NDATA, DDATA."""
        return self._data(node, [], changes, at, False, dead_devices)

    def _data(self, node: NodeView, events: list[Change], changes: list[Change], at: int, historical: bool,
              dead_devices: frozenset[str]) -> list[Message]:
        catalog = node.catalog
        node_payload = self._payload(node, timestamp=at)
        for event in events:
            self._add(node_payload, catalog, event, historical)
        by_device: dict[str, list[Change]] = {}
        for change in changes:
            if change.device == NODE:
                self._add(node_payload, catalog, change, historical)
            elif change.device not in dead_devices:
                by_device.setdefault(change.device, []).append(change)
        out = [Message(topic(node.group, "NDATA", node.line_id), node_payload.SerializeToString())] \
            if node_payload.metrics else []
        for device, device_changes in by_device.items():
            payload = self._payload(node, timestamp=at)
            for change in device_changes:
                self._add(payload, catalog, change, historical)
            out.append(Message(topic(node.group, "DDATA", node.line_id, device), payload.SerializeToString()))
        return out

    @staticmethod
    def _add(payload, catalog, change: Change, historical: bool) -> None:
        key = (change.device, change.name)
        metric = payload.metrics.add(alias=catalog.aliases[key], timestamp=change.at or payload.timestamp)
        if historical:
            metric.is_historical = True
        _set_value(metric, catalog.types[key] if key != (NODE, EVENT_SEQ) else UINT64, change.value)

    def command(self, node: NodeView, topic_name: str, payload: bytes) -> Command | None:
        levels = topic_name.split("/")
        if levels[:2] != [NAMESPACE, node.group] or len(levels) < 4 or levels[2] not in ("NCMD", "DCMD"):
            return None
        kind = levels[2]
        if len(payload) > MAX_COMMAND_BYTES:
            return Command(refused="too large", detail={"kind": kind, "bytes": len(payload)})
        try:
            decoded = pb.Payload.FromString(payload)
        except (DecodeError, ValueError, RuntimeError) as exc:
            return Command(refused="not a Sparkplug B payload", detail={"kind": kind, "error": str(exc)[:200]})
        names = [m.name or f"alias:{m.alias}" for m in decoded.metrics]
        detail = {"kind": kind, "device": levels[4] if len(levels) > 4 else None, "metrics": names[:20]}
        if kind == "NCMD" and len(decoded.metrics) == 1 and self._is_rebirth(decoded.metrics[0], node):
            return Command(rebirth=True, detail=detail)
        reason = "writes are not taken over MQTT" if decoded.metrics else "no metric"
        return Command(refused=reason, detail=detail)

    @staticmethod
    def _is_rebirth(metric, node: NodeView) -> bool:
        named = metric.name == REBIRTH or (not metric.name and metric.alias == node.catalog.aliases[(NODE, REBIRTH)])
        return named and metric.WhichOneof("value") == "boolean_value" and metric.boolean_value
