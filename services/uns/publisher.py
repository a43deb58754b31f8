"""The plant's publisher process: ``python -m services.uns --name uns`` (``linectl
up`` runs it when ``LINECTL_MQTT_URL`` is set).

It waits for the plant's publisher lock (``services.uns.outbox.PublisherLock``:
a standby on another host waits here), then runs one edge node per line of the
plant (``services.uns.node``) and wakes each when its line commits: it
consumes the line's ``line_events`` (the notification the gateway's stream
gets, on ``pgsql://`` a PostgreSQL NOTIFY) and reads the log itself, so a lost
wake-up costs a poll interval, never an event.

If the lock's session is lost (the database failed over, or the connection
broke) the process ends its sessions and exits with status 1: another
publisher may hold the lock now, and ``linectl up`` starts this one again as a
standby. A broker outage touches nothing else: the nodes keep storing in the
event log, and neither ``/readyz`` nor any line looks at the broker."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from contextlib import ExitStack
from datetime import UTC, datetime

from kombu import Connection, Queue
from nameko.rpc import RPC_QUEUE_TEMPLATE
from nameko.standalone.events import get_event_exchange

import shared.transport  # noqa: F401 - registers pgsql:// with kombu
from services.uns.json_topics import JsonTopics
from services.uns.node import EdgeNode
from services.uns.outbox import (
    LOCK_CHECK_SECONDS,
    LOCK_FENCE_SECONDS,
    LOCK_RETRY_SECONDS,
    LineOutbox,
    PublisherLock,
)
from services.uns.port import Format
from services.uns.sparkplug import Sparkplug
from shared import production_stats
from shared.config import Settings, nameko_config
from shared.db import roles
from shared.db.engine import make_engine
from shared.events import LINE_EVENTS, LineServices
from shared.plant import Plant
from shared.product_ideals import product_ideal_seconds

log = logging.getLogger(__name__)

CONTROLLER_CHECK_SECONDS = 1.0  # how often the line controllers' queues are looked at (Line/Controller)


def formats_for(name: str, settings: Settings) -> list[Format]:
    """The port's formats for ``LINECTL_MQTT_FORMAT``."""
    return {"sparkplug": [Sparkplug()], "json": [JsonTopics(settings.uns_prefix)],
            "both": [Sparkplug(), JsonTopics(settings.uns_prefix)]}[name]


class LineWakes:
    """One kombu consumer for every line's ``line_events``: a message wakes its line's node."""

    def __init__(self, amqp_uri: str, nodes: dict[str, EdgeNode], services: dict[str, str]):
        self.amqp_uri = amqp_uri
        self.nodes = nodes
        self.services = services  # line id -> its line_controller's service name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="uns-wakes", daemon=True)
        self._conn = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        stopping = getattr(self._conn and self._conn.transport, "stopping", None)
        if stopping is not None:
            stopping()
        self._thread.join(5)

    def _queues(self) -> list[Queue]:
        return [Queue(f"uns-events-{line_id}-{id(self):x}", exchange=get_event_exchange(service, {}),
                      routing_key=LINE_EVENTS, durable=False, auto_delete=True)
                for line_id, service in self.services.items()]

    def _woken(self, line_id: str):
        def woken(_body, message):
            message.ack()
            self.nodes[line_id].wake()
        return woken

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with Connection(self.amqp_uri, connect_timeout=5, heartbeat=0) as conn, ExitStack() as consumers:
                    self._conn = conn
                    for queue, line_id in zip(self._queues(), self.services, strict=True):
                        consumers.enter_context(conn.Consumer([queue], callbacks=[self._woken(line_id)],
                                                              accept=["json"]))
                    for node in self.nodes.values():
                        node.wake()  # whatever came while not consuming
                    while not self._stop.is_set():
                        try:
                            conn.drain_events(timeout=1)
                        except TimeoutError:
                            continue
            except Exception:  # noqa: BLE001 - reconnect; the nodes poll meanwhile
                log.warning("uns: the line events consumer lost its connection; reconnecting", exc_info=True)
                self._stop.wait(1.0)


class ControllerWatch:
    """Whether each line's controller runs: its RPC queue has a consumer (as the gateway's
    ``/api/lines`` tells it). Asked from the publisher's main thread every second; a
    transport that does not answer changes nothing (unknown is not down)."""

    def __init__(self, amqp_uri: str, services: dict[str, str]):
        self.amqp_uri = amqp_uri
        self.services = services  # line id -> its line_controller's service name
        self._conn = None

    def poll(self) -> dict[str, bool]:
        seen = {}
        for line_id, service in self.services.items():
            try:
                if self._conn is None:
                    self._conn = Connection(self.amqp_uri, connect_timeout=2, transport_options={"max_retries": 0})
                    self._conn.ensure_connection(max_retries=1, interval_start=0)
                queue = RPC_QUEUE_TEMPLATE.format(service)
                seen[line_id] = self._conn.default_channel.queue_declare(queue=queue, passive=True).consumer_count > 0
            except Exception as exc:  # noqa: BLE001 - a queue never declared, or the transport away
                if "NOT_FOUND" in str(exc) or type(exc).__name__ == "NotFound":
                    seen[line_id] = False
                self.close()
        return seen

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.release()
            except Exception:  # noqa: BLE001 - thrown away
                pass


class Publisher:
    def __init__(self, settings: Settings, plant: Plant):
        self.settings = settings
        self.plant = plant
        self.group = settings.sparkplug_group or plant.id
        self.engine = make_engine(settings.database_url, role=settings.db_role(roles.GATEWAY),
                                  pool_size=len(plant.lines) + 2)
        self.lock = PublisherLock(self.engine)
        self.stopping = threading.Event()
        self.nodes: dict[str, EdgeNode] = {}
        self._lock_ok_until = 0.0  # monotonic: the fence; nodes publish only before it
        self._lock_lost = threading.Event()

    def may_publish(self) -> bool:
        return time.monotonic() < self._lock_ok_until and not self._lock_lost.is_set()

    def _watch_lock(self) -> None:
        """Confirm the lock every LOCK_CHECK_SECONDS, on a thread of its own (the main
        loop may wait on the transport). Each confirmation moves the fence to its own
        start + LOCK_FENCE_SECONDS: a holder whose database died stops publishing by
        then, however long it takes to notice, and a new holder waits that long."""
        while not self.stopping.is_set():
            asked = time.monotonic()
            if not self.lock.held():
                self._lock_lost.set()
                # Out at once: its node threads and transport may wait on the dead database for
                # long. The broker sends each node's Will (its own bdSeq); `linectl up` restarts
                # this process as a standby; acks not yet saved are forwarded again (at least once).
                log.error("uns: the publisher lock's session is lost; exiting (another publisher may take over)")
                logging.shutdown()
                os._exit(1)
            self._lock_ok_until = asked + LOCK_FENCE_SECONDS
            self.stopping.wait(LOCK_CHECK_SECONDS)

    def request_stop(self, *_args) -> None:
        self.stopping.set()

    def run(self) -> int:
        log.info("uns: waiting for the plant's publisher lock (a standby waits here)")
        while not self.lock.try_take():
            if self.stopping.wait(LOCK_RETRY_SECONDS):
                return 0
        # A holder that lost the lock with its database publishes until its fence at most.
        if self.stopping.wait(LOCK_FENCE_SECONDS):
            self.lock.release()
            return 0
        self._lock_ok_until = time.monotonic() + LOCK_FENCE_SECONDS
        threading.Thread(target=self._watch_lock, name="uns-lock", daemon=True).start()
        log.info("uns: publisher lock taken; publishing %d line(s) to %s as %s (group %s)",
                 len(self.plant.lines), self.settings.mqtt_url, self.settings.mqtt_format, self.group)
        default = self.plant.default_line.id
        for line in self.plant.lines:
            outbox = LineOutbox(self.engine, line.id, default=line.id == default)
            self.nodes[line.id] = EdgeNode(self.settings, line.id, line.layout, outbox,
                                           formats_for(self.settings.mqtt_format, self.settings), self.group,
                                           shift_oee=self._shift_oee(line, outbox), may_publish=self.may_publish)
        services = {line.id: LineServices.of_line(line.id, line.id == default).line_controller
                    for line in self.plant.lines}
        amqp_uri = nameko_config(self.settings)["AMQP_URI"]
        wakes = LineWakes(amqp_uri, self.nodes, services)
        controllers = ControllerWatch(amqp_uri, services)
        for node in self.nodes.values():
            node.start()  # first: a takeover's births wait for nothing else
        wakes.start()
        self._controllers_seen(controllers)
        status = 0
        while not self.stopping.wait(CONTROLLER_CHECK_SECONDS):
            self._controllers_seen(controllers)
        if self._lock_lost.is_set():
            log.error("uns: the publisher lock's session is lost; stopping (another publisher may take over)")
            status = 1
        controllers.close()
        wakes.stop()
        for node in self.nodes.values():
            node.stopping.set()
        for node in self.nodes.values():
            node.stop()
        self.lock.release()
        log.info("uns: stopped")
        return status


    def _shift_oee(self, line, outbox: LineOutbox):
        """How a line's node reads its current shift's OEE (as the gateway's ``/oee``: the
        plant's calendar, the layout's ideal cycle times, SIM_SPEED times faster on a simulator)."""
        scale = production_stats.ideal_scale(self.settings.replace(plc=line.plc))
        ideals = {p: None if v is None else v / scale for p, v in product_ideal_seconds(line.layout).items()}
        calendar, microstop = self.plant.calendar, self.settings.microstop_seconds
        return lambda: outbox.shift_oee(calendar, ideals, microstop, datetime.now(UTC))

    def _controllers_seen(self, controllers: ControllerWatch) -> None:
        for line_id, up in controllers.poll().items():
            self.nodes[line_id].controller_seen(up)


def serve(settings: Settings, plant: Plant) -> int:
    publisher = Publisher(settings, plant)
    signal.signal(signal.SIGTERM, publisher.request_stop)
    signal.signal(signal.SIGINT, publisher.request_stop)
    return publisher.run()
