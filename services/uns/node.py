"""One line as an edge node: its own MQTT session, its outbox, its acknowledgements.

Everything of a node runs on its own thread, serially, as a line's loop does:
paho's callbacks only put what happened in the node's inbox. Each MQTT
session is a new paho client (``services.uns.session``).

**Store and forward.** The node's ``acked`` seq (``services.uns.acks``: what the
broker has acknowledged, in seq order) is saved in ``uns_node`` (at most every
``SAVE_SECONDS``). After any interruption
the node is born again with current values read at seq S, then publishes the
events after ``acked`` up to S as historical, at most ``HISTORY_EVENTS_PER_SECOND``,
between live transactions, which always go first.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from itertools import groupby

import paho.mqtt.client as mqtt

from services.uns.acks import Acknowledgements
from services.uns.commands import CommandDesk
from services.uns.model import LAST_PIECE, NODE, Catalog, LineModel, event_changes
from services.uns.outbox import LineOutbox
from services.uns.port import Format, Message
from services.uns.session import open_session

log = logging.getLogger(__name__)

POLL_SECONDS = 2.0  # the log is read this often without a wake-up (a lost one is caught here)
SAVE_SECONDS = 1.0
HEARTBEAT_SECONDS = 5.0
SHIFT_SECONDS = 10.0  # the current shift's OEE is read this often (and after each piece)
HISTORY_EVENTS_PER_SECOND = 2000
HISTORY_UNITS_IN_FLIGHT = 200
FIRST_RECONNECT_SECONDS = 0.5  # then twice as long after each failure, up to LINECTL_MQTT_RECONNECT_MAX_SECONDS
PAGE = 500


class EdgeNode:
    def __init__(self, settings, line_id: str, layout, outbox: LineOutbox, formats: list[Format], group: str,
                 counters=None, shift_oee=None, may_publish=None):
        self.settings = settings
        # The publisher's fence: False once its lock is not known to be held (services.uns.publisher)
        self.may_publish = may_publish or (lambda: True)
        self.line_id = line_id
        self.group = group
        self.outbox = outbox
        self.formats = formats
        self.catalog = Catalog.of_layout(layout)
        self.commands = CommandDesk(self, outbox)
        self.counters = counters
        self.shift_oee = shift_oee  # () -> (the current shift, its OEE item so far): the Line/OEE metrics
        self._shift_due = 0.0
        self._shift_failed = False
        self.inbox: queue.Queue = queue.Queue()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name=f"uns-{line_id}", daemon=True)
        self.bd_seq = 0
        self._seq = 0
        self.client: mqtt.Client | None = None
        self.connected = self.born = False
        self.host_online = settings.sparkplug_primary_host is None
        self.controller_up = True  # the publisher's watch of the line controller's queue says otherwise
        self.model: LineModel | None = None
        self.live_after = 0
        self.history: list[list[int]] = []  # [after, upto] ranges still to forward as historical
        self.acks = Acknowledgements()  # services.uns.acks: what the broker has acknowledged
        self.dead_devices: frozenset[str] = frozenset()
        self._next_connect = 0.0
        self._unreachable_said = False  # the broker's absence is logged once, until it answers again
        self._backoff = min(FIRST_RECONNECT_SECONDS, self.settings.mqtt_reconnect_max_seconds)
        self._saved = (None, None)
        self._unsaved_messages = 0
        self._saved_at = 0.0
        self._history_tokens = float(HISTORY_EVENTS_PER_SECOND)
        self._tokens_at = time.monotonic()

    # -- what a format asks of its node ------------------------------------------------

    def first_seq(self) -> int:
        self._seq = 1
        return 0

    def next_seq(self) -> int:
        seq, self._seq = self._seq, (self._seq + 1) % 256
        return seq

    # -- other threads -------------------------------------------------------------------

    def wake(self) -> None:
        self.inbox.put(("wake",))

    def controller_seen(self, up: bool) -> None:
        """Whether the line's controller consumes its queue (the publisher asks every second)."""
        self.inbox.put(("controller", up))

    def start(self) -> EdgeNode:
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        self.inbox.put(("stop",))
        self.thread.join(timeout)

    # -- the node's thread ---------------------------------------------------------------

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                if self.outbox.ready():
                    self.acks.acked, self.bd_seq = self.outbox.start()
                    self._saved = (self.acks.acked, self.bd_seq)
                    break
            except Exception:  # noqa: BLE001 - the database is away: try again
                log.warning("uns %s: the line's outbox cannot be read yet", self.line_id, exc_info=True)
            self.stopping.wait(2.0)
        while not self.stopping.is_set():
            try:
                self._turn()
            except Exception:  # noqa: BLE001 - a database or broker failure: start the session again
                log.warning("uns %s: publishing failed; the session starts again", self.line_id, exc_info=True)
                self._end_session(clean=False)
                self.stopping.wait(1.0)
        # An NDEATH only while the lock is ours: else the Will (this session's bdSeq) says it.
        self._end_session(clean=self.may_publish())
        self._save(force=True)

    def _turn(self) -> None:
        if not self.may_publish():
            # Another publisher may hold the lock now: nothing is sent, no session is begun,
            # until this one's lock is confirmed again (or the publisher stops).
            self.stopping.wait(0.05)
            return
        if self.client is None and time.monotonic() >= self._next_connect:
            self._connect()
        busy = self.born and self.history and self.acks.in_flight() < HISTORY_UNITS_IN_FLIGHT
        # Without a session: awake for the next try (its back-off), not for the next poll.
        idle = POLL_SECONDS if self.client else max(0.0, min(POLL_SECONDS, self._next_connect - time.monotonic()))
        try:
            item = self.inbox.get(timeout=0.05 if busy else idle)
            self._handle(item)
            while True:
                self._handle(self.inbox.get_nowait())
        except queue.Empty:
            pass
        if self.born:
            self._publish_live()
            self._forward_history()
            if time.monotonic() >= self._shift_due:
                self._shift()
        self._save()

    def _handle(self, item) -> None:
        kind, args = item[0], item[1:]
        if kind in ("wake", "stop"):
            return
        if kind == "controller":
            self._controller(args[0])
            return
        if args[0] is not self.client:
            return  # a session already ended
        if kind == "puback":
            self.acks.acknowledged(args[1])
        elif kind == "connected":
            self._connected(args[1])
        elif kind == "disconnected":
            log.warning("uns %s: the broker connection is lost (%s)", self.line_id, args[1])
            self._end_session(clean=False)
        elif kind == "unreachable":
            # paho tried once and gave up (reconnect_on_failure off): try again, as a new session
            (log.debug if self._unreachable_said else log.warning)(
                "uns %s: the broker cannot be reached; trying again every %.1f s at most", self.line_id,
                self.settings.mqtt_reconnect_max_seconds)
            self._unreachable_said = True
            self._end_session(clean=False)
        elif kind == "message":
            self._message(args[1], args[2])

    # -- the MQTT session ----------------------------------------------------------------

    def _connect(self) -> None:
        self.bd_seq = (self.bd_seq + 1) % 256  # every CONNECT has its own bdSeq (Sparkplug 3.0)
        self.outbox.save(bd_seq=self.bd_seq, connected=False)
        wills = [w for w in (f.will(self) for f in self.formats) if w is not None]
        self.client = open_session(self.settings, f"linectl-uns-{self.group}-{self.line_id}", wills, self.inbox.put)
        self.client.loop_start()

    def _connected(self, reason) -> None:
        if getattr(reason, "is_failure", False):
            log.warning("uns %s: the broker refused the connection (%s)", self.line_id, reason)
            self._end_session(clean=False)
            return
        log.info("uns %s: connected (bdSeq %d)", self.line_id, self.bd_seq)
        self.connected, self._unreachable_said = True, False
        self._backoff = min(FIRST_RECONNECT_SECONDS, self.settings.mqtt_reconnect_max_seconds)
        topics = [t for f in self.formats for t in f.subscriptions(self)]
        if self.settings.sparkplug_primary_host:
            self.host_online = False  # until the host's STATE says so
            topics.append(f"spBv1.0/STATE/{self.settings.sparkplug_primary_host}")
        for t in topics:
            self.client.subscribe(t, qos=1)
        self.outbox.save(connected=True)
        if self.host_online:
            self._birth()

    def _end_session(self, *, clean: bool) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        if clean and self.born:
            infos = [client.publish(m.topic, m.payload, m.qos, m.retain) for f in self.formats for m in f.death(self)]
            for info in infos:
                info.wait_for_publish(2.0)
        try:
            client.disconnect()
            client.loop_stop()
        except Exception:  # noqa: BLE001
            pass
        self.connected = self.born = False
        self.acks.clear()
        self.history.clear()
        self._next_connect = time.monotonic() + (0 if clean else self._backoff)
        self._backoff = min(self._backoff * 2, self.settings.mqtt_reconnect_max_seconds)
        if not self.stopping.is_set():
            self.outbox.save(connected=False)

    # -- births, live and historical transactions ---------------------------------------------

    def _birth(self) -> None:
        """NBIRTH and DBIRTHs with the values read now, then the backlog as historical."""
        rebirth = self.born
        if rebirth:
            self._publish_live()
        model = self.outbox.snapshot(self.catalog)
        model.set_controller(self.controller_up, model.at)
        self._read_shift(model, model.at)
        if rebirth and model.seq > self.live_after:
            self.history.append([self.live_after, model.seq])
        elif not rebirth:
            self.history = [[self.acks.acked, model.seq]] if model.seq > self.acks.acked else []
        self.model, self.live_after, self.born = model, model.seq, True
        self.dead_devices = frozenset() if model.plc_connected else frozenset(self.catalog.devices)
        live = [d for d in self.catalog.devices if d not in self.dead_devices]
        self._send([m for f in self.formats for m in f.birth(self, model, live)], None)
        log.info("uns %s: born at seq %d (bdSeq %d, %d to forward)", self.line_id, model.seq, self.bd_seq,
                 sum(b - a for a, b in self.history))

    def _publish_live(self) -> None:
        while self.born:
            frames = self.outbox.frames_after(self.live_after, PAGE)
            if not frames:
                return
            for tx in self._transactions(frames, full=len(frames) == PAGE):
                self._live_transaction(tx)

    @staticmethod
    def _transactions(frames: list[dict], full: bool) -> list[list[dict]]:
        txs = [list(g) for _k, g in groupby(frames, key=lambda f: f["txId"])]
        return txs[:-1] if full and len(txs) > 1 else txs  # a page may end inside a transaction

    def _live_transaction(self, frames: list[dict]) -> None:
        changes = self.model.apply(frames, cycles=self.outbox.cycles)
        pieces = self.outbox.finished_pieces(frames)
        if pieces:
            self.model.values[(NODE, LAST_PIECE)] = pieces[-1].summary
            self._shift_due = 0.0  # a piece counts in performance and quality: the figures now
        msgs = [m for f in self.formats for m in f.transaction(self, frames, changes, historical=False,
                                                               dead_devices=self.dead_devices, pieces=pieces)]
        plc = self.model.plc_connected
        if not plc and len(self.dead_devices) < len(self.catalog.devices):
            msgs += [m for f in self.formats for d in self.catalog.devices if d not in self.dead_devices
                     for m in f.device_death(self, d, changes[0].at if changes else 0)]
            self.dead_devices = frozenset(self.catalog.devices)
        elif plc and self.dead_devices:
            msgs += [m for f in self.formats for d in sorted(self.dead_devices, key=self.catalog.devices.index)
                     for m in f.device_birth(self, self.model, d)]
            self.dead_devices = frozenset()
        self._send(msgs, (self.live_after, frames[-1]["seq"]))
        self.live_after = frames[-1]["seq"]

    def _controller(self, up: bool) -> None:
        if up == self.controller_up:
            return
        log.info("uns %s: the line's controller is %s", self.line_id, "up" if up else "down")
        self.controller_up = up
        if not self.born:
            return  # the next birth says it
        self._publish_live()  # what it logged before going comes first
        at = int(time.time() * 1000)
        changes = self.model.set_controller(up, at)
        self._send([m for f in self.formats for m in f.values(self, changes, at=at, dead_devices=self.dead_devices)],
                   None)

    def _read_shift(self, model: LineModel, at: int) -> list:
        """The current shift's OEE into ``model``; what changed. Read every ``SHIFT_SECONDS``
        (availability and performance move with time) and after a piece finishes."""
        self._shift_due = time.monotonic() + SHIFT_SECONDS
        if self.shift_oee is None:
            return []
        try:
            shift, figures = self.shift_oee()
        except Exception:  # noqa: BLE001 - the figures wait; publishing goes on
            (log.debug if self._shift_failed else log.warning)(
                "uns %s: the shift's OEE could not be read", self.line_id, exc_info=True)
            self._shift_failed = True
            return []
        self._shift_failed = False
        return model.set_shift(shift, figures, at)

    def _shift(self) -> None:
        at = int(time.time() * 1000)
        changes = self._read_shift(self.model, at)
        if changes:
            self._send([m for f in self.formats for m in f.values(self, changes, at=at,
                                                                  dead_devices=self.dead_devices)], None)

    def _forward_history(self) -> None:
        now = time.monotonic()
        self._history_tokens = min(HISTORY_EVENTS_PER_SECOND,
                                   self._history_tokens + (now - self._tokens_at) * HISTORY_EVENTS_PER_SECOND)
        self._tokens_at = now
        while self.history and self._history_tokens >= 1 and self.acks.in_flight() < HISTORY_UNITS_IN_FLIGHT:
            after, upto = self.history[0]
            frames = self.outbox.frames_after(after, min(PAGE, int(self._history_tokens) + 1), upto=upto)
            if not frames:
                self.history.pop(0)
                continue
            for tx in self._transactions(frames, full=frames[-1]["seq"] < upto):
                changes = {(c.device, c.name): c for f in tx for c in event_changes(f, self.catalog)}
                msgs = [m for f in self.formats for m in f.transaction(
                    self, tx, list(changes.values()), historical=True, dead_devices=self.dead_devices,
                    pieces=self.outbox.finished_pieces(tx))]
                self._send(msgs, (self.history[0][0], tx[-1]["seq"]))
                self.history[0][0] = tx[-1]["seq"]
                self._history_tokens -= len(tx)
            if self.history[0][0] >= upto:
                self.history.pop(0)

    def _send(self, msgs: list[Message], span: tuple[int, int] | None) -> None:
        if not self.may_publish():  # checked again here: _turn's check came before its wait
            raise RuntimeError("the publisher's lock is not confirmed: nothing more is sent")
        infos = [(m.qos, self.client.publish(m.topic, m.payload, m.qos, m.retain)) for m in msgs]
        self._unsaved_messages += len(msgs)
        if self.counters is not None:
            self.counters.published(self.line_id, len(msgs))
        if span is not None:
            self.acks.sent(span, [info.mid for qos, info in infos if qos > 0])

    def _save(self, force: bool = False) -> None:
        now = time.monotonic()
        due = now - self._saved_at >= (SAVE_SECONDS if self._saved[0] != self.acks.acked else HEARTBEAT_SECONDS)
        if (due or force) and self._saved[1] is not None:
            self.outbox.save(acked_seq=self.acks.acked, messages=self._unsaved_messages)
            self._saved, self._unsaved_messages, self._saved_at = (self.acks.acked, self.bd_seq), 0, now

    # -- commands and the primary host -------------------------------------------------------

    def _message(self, topic: str, payload: bytes) -> None:
        host = self.settings.sparkplug_primary_host
        if host and topic == f"spBv1.0/STATE/{host}":
            self._host_state(payload)
            return
        for f in self.formats:
            command = f.command(self, topic, payload)
            if command is None:
                continue
            if command.rebirth and self.born:
                log.info("uns %s: rebirth asked by a host", self.line_id)
                self._birth()
            elif command.refused:
                self.commands.refused(topic, command)
            return

    def _host_state(self, payload: bytes) -> None:
        try:
            state = json.loads(payload.decode())
            online = state.get("online") is True if isinstance(state, dict) else False
        except (UnicodeDecodeError, ValueError):
            online = payload.strip().upper() == b"ONLINE"  # Sparkplug 2.2's plain STATE
        if online and not self.host_online:
            log.info("uns %s: the primary host %s is online", self.line_id, self.settings.sparkplug_primary_host)
            self.host_online = True
            if self.connected and not self.born:
                self._birth()
        elif not online and self.host_online:
            log.warning("uns %s: the primary host %s is offline; the node ends its session and stores",
                        self.line_id, self.settings.sparkplug_primary_host)
            self.host_online = False
            self._end_session(clean=True)
