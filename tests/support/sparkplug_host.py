"""A Sparkplug B host application for the tests, written from the Eclipse
Sparkplug 3.0.0 specification (not from the publisher's code; it shares only
the generated schema, ``services.uns.proto``).

It subscribes to ``spBv1.0/<group>/#``, decodes every payload, and per edge
node checks what a host must:

* NBIRTH has ``seq`` 0 and a ``bdSeq``; every later message of the node until
  its death has the previous ``seq`` + 1 (mod 256), else it is a *seq error*
  and the host asks for a rebirth (NCMD ``Node Control/Rebirth``);
* an NDEATH whose ``bdSeq`` is not the current birth's is stale (ignored);
* DATA metrics come by alias, mapped through the births' names;
* a historical metric (``is_historical``) never updates the live value;
* a message delivered twice (QoS 1 is at least once: a broker that crashed
  resends, from its last saved state, what it had not seen acknowledged) is
  the same bytes on the same topic *within the node's session*: the copy is
  counted (``redelivered``) and dropped, as a host drops a duplicate. A new
  session (an NBIRTH) starts afresh: its messages may repeat an older
  session's bytes exactly (seq restarts at 0, and a publisher that forwards
  its backlog again from the same acknowledged point sends the same
  historical metrics with the same seq), and they are new messages. (Copies
  of an old session's messages come before the new NBIRTH: a broker delivers
  a subscriber's queue in order.)

A host that joins a running node knows nothing of it before its births: it
ignores the node's data until then and asks for them (``join``).

It records every message (``messages``), the ``Line/EventSeq`` values seen
(``event_seqs``), and anything a host would call wrong (``errors``). With
``host_id`` it is a primary host: its ``STATE`` is retained online, with a Will
that says offline."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from dataclasses import dataclass, field

import paho.mqtt.client as mqtt

from services.uns.proto import sparkplug_b_pb2 as pb
from tests.support.waiting import wait_for

NS = "spBv1.0"


@dataclass
class Seen:
    kind: str
    node: str
    device: str | None
    seq: int | None
    metrics: list[dict]
    at: float


@dataclass
class NodeState:
    online: bool = False
    bd_seq: int | None = None
    last_seq: int | None = None
    aliases: dict[int, str] = field(default_factory=dict)  # alias -> "device/name" (device "" for the node)
    live: dict[str, object] = field(default_factory=dict)
    devices_online: set[str] = field(default_factory=set)
    births: int = 0
    birth_event_seq: int | None = None


def value_of(metric) -> object:
    if metric.is_null:
        return None
    kind = metric.WhichOneof("value")
    value = getattr(metric, kind) if kind else None
    if kind == "long_value" and metric.datatype in (pb.Int8, pb.Int16, pb.Int32, pb.Int64) and value >= 2 ** 63:
        value -= 2 ** 64
    return value


class SparkplugHost:
    def __init__(self, broker_url: str, group: str, *, host_id: str | None = None, client_kwargs=None,
                 persistent: bool = False):
        self.group = group
        self.host_id = host_id
        self.lock = threading.Lock()
        self.messages: list[Seen] = []
        self.nodes: dict[str, NodeState] = {}
        self.event_seqs: dict[str, list[tuple[int, bool]]] = {}  # node -> [(EventSeq, historical)]
        self.errors: list[str] = []
        self.rebirths_asked = 0
        self.redelivered = 0
        # node -> digests of (topic, payload) of its current session's messages (since its NBIRTH)
        self._session_digests: dict[str, set[bytes]] = {}
        self.trace: list[str] = []  # every message received, one line each (what a failure shows)
        host, _, port = broker_url.split("://", 1)[1].partition(":")
        # persistent: the broker keeps the host's session while it is away (a historian's way).
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-host-{id(self):x}",
                                  clean_session=not persistent)
        self.client.reconnect_delay_set(1, 2)
        for name, args in (client_kwargs or {}).items():
            getattr(self.client, name)(*args)
        if host_id:
            self.client.will_set(self.state_topic, self._state(False), qos=1, retain=True)
        self.subscribed = threading.Event()
        self.client.on_connect = self._on_connect
        self.subscribed_at = 0.0  # time.time() of the last subscription's acknowledgement
        self.client.on_subscribe = self._on_subscribe
        self.client.on_message = self._on_message
        self.client.connect(host, int(port or 1883), keepalive=5)
        self.client.loop_start()

    @property
    def state_topic(self) -> str:
        return f"{NS}/STATE/{self.host_id}"

    @staticmethod
    def _state(online: bool) -> bytes:
        return json.dumps({"online": online, "timestamp": int(time.time() * 1000)}).encode()

    def set_online(self, online: bool) -> None:
        self.client.publish(self.state_topic, self._state(online), qos=1, retain=True).wait_for_publish(5)

    def _on_connect(self, client, _userdata, _flags, _rc, _props):
        client.subscribe(f"{NS}/{self.group}/#", qos=1)
        if self.host_id:
            self.set_online(True)

    def _on_subscribe(self, *_args) -> None:
        self.subscribed_at = time.time()
        self.subscribed.set()

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    # -- what the host does with a message -------------------------------------------------

    def _on_message(self, _client, _userdata, msg) -> None:
        try:
            self._receive(msg)
        except Exception as exc:  # noqa: BLE001 - paho's thread would end with it: said, as an error
            self.errors.append(f"{msg.topic}: the host failed on it: {exc!r}")

    def _receive(self, msg) -> None:
        levels = msg.topic.split("/")
        if len(levels) < 4 or levels[2] in ("NCMD", "DCMD"):
            return
        kind, node_id, device = levels[2], levels[3], levels[4] if len(levels) > 4 else None
        digest = hashlib.sha1(msg.topic.encode() + b"\0" + msg.payload).digest()
        try:
            payload = pb.Payload.FromString(msg.payload)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"{msg.topic}: undecodable ({exc})")
            return
        with self.lock:
            seen = self._session_digests.setdefault(node_id, set())
            node = self.nodes.setdefault(node_id, NodeState())
            self.trace.append(self._traced(msg, payload, digest in seen, node))
            if digest in seen:
                self.redelivered += 1
                return
            if kind == "NBIRTH":
                seen = self._session_digests[node_id] = set()
            seen.add(digest)
            self._check(kind, node_id, device, node, payload)

    @staticmethod
    def _traced(msg, payload, copy: bool, node: NodeState) -> str:
        """One line: when, the topic, seq, bdSeq, the Line/EventSeq values (h: historical), the
        broker's message id and DUP flag (COPY: dropped as a duplicate)."""
        bd, events = None, []
        for m in payload.metrics:
            name = m.name or node.aliases.get(m.alias, "")
            if name == "bdSeq":
                bd = value_of(m)
            elif name.endswith("/Line/EventSeq") or name == "Line/EventSeq":
                events.append(f"{value_of(m)}{'h' if m.is_historical else ''}")
        seq = payload.seq if payload.HasField("seq") else None
        return (f"{time.time():.3f} {msg.topic} seq={seq} bdSeq={bd} EventSeq={','.join(events)} "
                f"ts={payload.timestamp} dup={int(msg.dup)} mid={msg.mid}{' COPY' if copy else ''}")

    def _traced_of(self, node_id: str, count: int) -> list[str]:
        """The node's last ``count`` messages received, as traced (the lock held)."""
        found = []
        for line in reversed(self.trace):
            if line.split(" ", 2)[1].split("/")[3:4] == [node_id]:
                found.append(line)
                if len(found) == count:
                    break
        return found[::-1]

    def _metrics(self, node_id: str, node: NodeState, device: str | None, payload, birth: bool) -> list[dict]:
        out = []
        for m in payload.metrics:
            if birth:
                # A birth names every metric, with its type and an alias unique in the node.
                if not m.name or not m.HasField("alias") or not m.datatype:
                    self.errors.append(f"{node_id}/{device or ''}: a birth's metric without name, alias or type: {m}")
                elif node.aliases.get(m.alias, f"{device or ''}/{m.name}") != f"{device or ''}/{m.name}":
                    self.errors.append(f"{node_id}: alias {m.alias} of {node.aliases[m.alias]} and {m.name}")
                node.aliases[m.alias] = f"{device or ''}/{m.name}"
            name = f"{device or ''}/{m.name}" if m.name else node.aliases.get(m.alias)
            if name is None:
                self.errors.append(f"{node_id}: unknown alias {m.alias}")
                continue
            out.append({"name": name, "value": value_of(m), "historical": m.is_historical,
                        "timestamp": m.timestamp, "datatype": m.datatype})
        return out

    def _check(self, kind: str, node_id: str, device: str | None, node: NodeState, payload) -> None:
        seq = payload.seq if payload.HasField("seq") else None
        if kind == "NDEATH":
            bd = {m.name: value_of(m) for m in payload.metrics}.get("bdSeq")
            if bd is not None and bd == node.bd_seq:
                node.online, node.last_seq = False, None
                node.devices_online.clear()
            self.messages.append(Seen(kind, node_id, None, None, [{"name": "/bdSeq", "value": bd}], time.time()))
            return
        if kind == "NBIRTH":
            if seq != 0:
                self.errors.append(f"{node_id}: NBIRTH with seq {seq}")
            node.aliases.clear()
            metrics = self._metrics(node_id, node, None, payload, birth=True)
            values = {m["name"]: m["value"] for m in metrics}
            node.bd_seq, node.online, node.last_seq, node.births = values.get("/bdSeq"), True, 0, node.births + 1
            node.birth_event_seq = values.get("/Line/EventSeq")
            node.live.update(values)
            node.devices_online.clear()
            self.messages.append(Seen(kind, node_id, None, seq, metrics, time.time()))
            return
        if not node.online:
            if node.births == 0:
                return  # a host that joined a running node: nothing of it is known before its births (join)
            self.errors.append(f"{node_id}: {kind} while the node is not born")
            return
        if seq is None or seq != (node.last_seq + 1) % 256:
            self.errors.append(f"{node_id}: {kind} seq {seq} after {node.last_seq}; received before it:\n"
                               + "\n".join(self._traced_of(node_id, 12)))
            self.request_rebirth(node_id, wait=False)
        node.last_seq = seq
        metrics = self._metrics(node_id, node, device, payload, birth=kind == "DBIRTH")
        if kind == "DBIRTH":
            node.devices_online.add(device)
        elif kind == "DDEATH":
            node.devices_online.discard(device)
        elif kind == "DDATA" and device not in node.devices_online:
            self.errors.append(f"{node_id}/{device}: DDATA for a dead device")
        for m in metrics:
            if m["name"] == "/Line/EventSeq":
                self.event_seqs.setdefault(node_id, []).append((m["value"], m["historical"]))
            if not m["historical"]:
                node.live[m["name"]] = m["value"]
        self.messages.append(Seen(kind, node_id, device, seq, metrics, time.time()))

    # -- asking ------------------------------------------------------------------------------

    def request_rebirth(self, node_id: str, wait: bool = True) -> None:
        self.rebirths_asked += 1
        self.command(node_id, [("Node Control/Rebirth", pb.Boolean, True)], wait=wait)

    def command(self, node_id: str, metrics: list[tuple[str, int, object]], device: str | None = None,
                wait: bool = True) -> None:
        payload = pb.Payload(timestamp=int(time.time() * 1000))
        for name, datatype, value in metrics:
            m = payload.metrics.add(name=name, datatype=datatype)
            if datatype == pb.Boolean:
                m.boolean_value = bool(value)
            elif datatype == pb.String:
                m.string_value = str(value)
            else:
                m.long_value = int(value)
        self.raw(node_id, payload.SerializeToString(), device, wait=wait)

    def raw(self, node_id: str, data: bytes, device: str | None = None, wait: bool = True) -> None:
        """``wait``: until the broker has it; not on paho's own thread (a message's callback),
        which is the one that would read the acknowledgement."""
        kind = "DCMD" if device else "NCMD"
        topic = "/".join([NS, self.group, kind, node_id] + ([device] if device else []))
        info = self.client.publish(topic, data, qos=1)
        if wait:
            info.wait_for_publish(5)

    def join(self, node_id: str, devices: set[str], timeout: float = 60.0) -> None:
        """Joining a running node: ask for its births (again every 3 s: a publisher taking
        over answers none) until the node and ``devices`` are born in this host."""
        assert self.subscribed.wait(10), "the host's subscription"
        asked = [0.0]

        def born() -> bool:
            with self.lock:
                node = self.nodes.get(node_id)
                if node is not None and node.online and node.devices_online >= devices:
                    return True
            if time.monotonic() - asked[0] >= 3.0:
                asked[0] = time.monotonic()
                self.request_rebirth(node_id)
            return False
        wait_for(born, timeout, 0.02, lambda: f"{node_id} born in a host that joined it\n"
                 + "\n".join(self._traced_of(node_id, 20)))

    # -- what it saw -------------------------------------------------------------------------

    def of(self, node_id: str, kind: str | None = None) -> list[Seen]:
        with self.lock:
            return [m for m in self.messages if m.node == node_id and (kind is None or m.kind == kind)]

    def missing_event_seqs(self, node_id: str, first: int, last: int) -> list[int]:
        with self.lock:
            seen = {s for s, _h in self.event_seqs.get(node_id, [])}
        return [s for s in range(first, last + 1) if s not in seen]
