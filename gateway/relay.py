"""The gateway's feed of ``line_events``: a kombu consumer thread.

Each gateway process binds its own auto-delete queue to a line_controller's
events exchange (one relay per line: ``gateway.lines``), so every process
receives every event of that line (a shared nameko ``event_handler`` queue
would split them between processes). There is no nameko container in the
gateway; this thread is plain kombu.

Each message's frames go to the process's listeners in one call
(``on_frames``): the websocket StreamHub, which must never block the relay;
after a reconnect of the consumer they get ``on_resync()``, since events
published while disconnected were lost and must be re-read from
``event_log``. :class:`Subscription` is a bounded-queue listener for code that
wants to block on frames (benchmarks, tests).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import uuid

from kombu import Connection, Queue
from nameko.standalone.events import get_event_exchange

import shared.transport  # noqa: F401 - registers pgsql:// with kombu once that transport exists
from shared.events import LINE_CONTROLLER, LINE_EVENTS

log = logging.getLogger(__name__)

RESYNC = object()  # a Subscription's "re-read the event log": events may have been missed


class Subscription:
    """A listener with a bounded queue; marked ``overflowed`` instead of blocking."""

    def __init__(self, maxsize: int):
        self.queue: queue.Queue = queue.Queue(maxsize=maxsize)
        self.overflowed = False

    def push(self, item) -> None:
        if self.overflowed:
            return
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            self.overflowed = True

    def on_frames(self, frames: list[dict]) -> None:
        for frame in frames:
            self.push(frame)

    def on_resync(self) -> None:
        self.push(RESYNC)


class EventRelay:
    """``service``: the line_controller whose events it relays (a line's own name,
    ``shared.events.LineServices``); ``line_id``: set, every frame names it (``lineId``)."""

    def __init__(self, amqp_uri: str, *, service: str = LINE_CONTROLLER, line_id: str | None = None):
        self.amqp_uri = amqp_uri
        self.service = service
        self.line_id = line_id
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._listeners: list = []
        self._thread: threading.Thread | None = None
        self._conn: Connection | None = None  # the consumer thread's, while it drains
        self.queue_name = f"gateway-events-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # -- listeners ----------------------------------------------------------

    def add_listener(self, listener) -> None:
        """``listener.on_frames(frames)`` / ``on_resync()``, called on the relay thread; must not block."""
        with self._lock:
            self._listeners = [*self._listeners, listener]

    def remove_listener(self, listener) -> None:
        with self._lock:
            self._listeners = [x for x in self._listeners if x is not listener]

    def subscribe(self, maxsize: int = 1000) -> Subscription:
        sub = Subscription(maxsize)
        self.add_listener(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.remove_listener(sub)

    # -- the consumer thread ------------------------------------------------

    def start(self, timeout: float = 15.0) -> bool:
        """Start the consumer; True once its queue is bound (events flow)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="line-events-relay", daemon=True)
            self._thread.start()
        return self.ready.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        conn = self._conn
        stopping = getattr(conn and conn.transport, "stopping", None)  # pgsql://: no drain timeout to wait out
        if stopping is not None:
            stopping()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _on_message(self, body, message) -> None:
        message.ack()
        frames = body.get("events") if isinstance(body, dict) else None
        frames = [f for f in frames or [] if isinstance(f, dict) and type(f.get("seq")) is int]
        if self.line_id is not None:
            frames = [{**f, "lineId": self.line_id} for f in frames]
        if frames:
            for listener in self._listeners:
                listener.on_frames(frames)

    def _run(self) -> None:
        exchange = get_event_exchange(self.service, {})
        bound_before = False
        while not self._stop.is_set():
            try:
                with Connection(self.amqp_uri, connect_timeout=5, heartbeat=0) as conn:
                    self._conn = conn
                    events = Queue(self.queue_name, exchange=exchange, routing_key=LINE_EVENTS,
                                   durable=False, auto_delete=True)
                    with conn.Consumer(events, callbacks=[self._on_message], accept=["json"]):
                        if bound_before:
                            for listener in self._listeners:
                                listener.on_resync()
                        bound_before = True
                        self.ready.set()
                        while not self._stop.is_set():
                            try:
                                conn.drain_events(timeout=1)
                            except TimeoutError:
                                continue
            except Exception:  # noqa: BLE001 - reconnect after any transport failure
                self.ready.clear()
                log.warning("line_events consumer lost its connection; reconnecting", exc_info=True)
                self._stop.wait(1.0)
