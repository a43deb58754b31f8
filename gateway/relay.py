"""The gateway's feed of ``line_events``: a kombu consumer thread.

Each gateway process binds its own auto-delete queue to the line_controller's
events exchange, so every process receives every event (a shared nameko
``event_handler`` queue would split them between processes). There is no
nameko container in the gateway; this thread is plain kombu.

Frames are fanned out to per-client bounded queues (:class:`Subscription`);
pushing never blocks, so one slow websocket client cannot stall the others
— its queue fills and it is marked ``overflowed``. After a reconnect of the
consumer, subscribers get :data:`RESYNC` and re-read ``event_log`` from
their last seq, since events published while disconnected were lost.
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

RESYNC = object()  # "re-read the event log": events may have been missed


class Subscription:
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


class EventRelay:
    def __init__(self, amqp_uri: str, *, service: str = LINE_CONTROLLER):
        self.amqp_uri = amqp_uri
        self.service = service
        self.ready = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._subscribers: set[Subscription] = set()
        self._thread: threading.Thread | None = None
        self.queue_name = f"gateway-events-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    # -- subscribers ------------------------------------------------------

    def subscribe(self, maxsize: int = 1000) -> Subscription:
        sub = Subscription(maxsize)
        with self._lock:
            self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    def _broadcast(self, item) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.push(item)

    # -- the consumer thread ------------------------------------------------

    def start(self, timeout: float = 15.0) -> bool:
        """Start the consumer; True once its queue is bound (events flow)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="line-events-relay", daemon=True)
            self._thread.start()
        return self.ready.wait(timeout)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _on_message(self, body, message) -> None:
        message.ack()
        frames = body.get("events") if isinstance(body, dict) else None
        for frame in frames or []:
            if isinstance(frame, dict) and isinstance(frame.get("seq"), int):
                self._broadcast(frame)

    def _run(self) -> None:
        exchange = get_event_exchange(self.service, {})
        bound_before = False
        while not self._stop.is_set():
            try:
                with Connection(self.amqp_uri, connect_timeout=5, heartbeat=0) as conn:
                    events = Queue(self.queue_name, exchange=exchange, routing_key=LINE_EVENTS,
                                   durable=False, auto_delete=True)
                    with conn.Consumer(events, callbacks=[self._on_message], accept=["json"]):
                        if bound_before:
                            self._broadcast(RESYNC)
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
