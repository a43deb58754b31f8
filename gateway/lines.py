"""One line as the gateway serves it: :class:`LinePort`.

A plant is several lines behind one gateway (``shared.plant``). Each line gets
a port with everything of its own: its names on the transport
(``shared.events.LineServices``), its read sessions (its schema first on the
search path, ``shared.db.lines``), its RPC pools, its ServiceWatch, its event
relay and its stream hub. Nothing of one line is shared with another, so a
line whose controller is down stalls neither another line's commands nor its
relay nor its streams. The parts start on first use: a line nobody asks about
costs nothing.

The default line's port is what the unprefixed paths use; in a one-line
deployment it is the only one, its tables are ``public``'s and its services
have today's names."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker

from gateway.errors import ApiError
from gateway.event_log import read_log
from gateway.relay import EventRelay
from gateway.rpc import RpcPool
from gateway.service_watch import ServiceWatch
from gateway.stream_client import HubLimits
from gateway.stream_hub import StreamHub, StreamSlots
from shared import production_stats
from shared.config import Settings, nameko_config
from shared.db.engine import make_sessionmaker
from shared.db.lines import PUBLIC, LineNotPlaced, placement
from shared.events import LineServices
from shared.plant import PlantLine

T = TypeVar("T")

STATUS_RPC_TIMEOUT = 2.0  # /readyz and /metrics must answer fast when the loop is down


class LineNotReady(ApiError):
    """503: the line has no tables yet (its controller never started, nor ran
    ``linectl migrate`` with the plant file)."""

    def __init__(self, why: str):
        super().__init__(503, "UNAVAILABLE", why)


class LineSchema:
    """Where a line's tables are: asked of ``plant_line`` on the line's first
    transaction and kept (a placement never moves). Each transaction of the line
    then puts its schema first on the search path, so the gateway's SQL names
    no schema; the line of ``public`` (a one-line plant's) sets nothing."""

    def __init__(self, line_id: str, default: bool):
        self.line_id = line_id
        self.default = default
        self.qualified: str | None = None  # the quoted schema; None until known

    def enter(self, _session, _transaction, connection) -> None:
        """``after_begin``: scope the transaction to the line's schema."""
        if self.qualified is None:
            try:
                place = placement(connection, self.line_id, default=self.default)
            except LineNotPlaced as exc:
                raise LineNotReady(str(exc)) from None
            self.qualified = "" if place.schema == PUBLIC else place.qualified
        if self.qualified:
            connection.exec_driver_sql(f"SET LOCAL search_path TO {self.qualified}, public")


def line_sessions(engine: Engine, line_id: str, default: bool) -> sessionmaker:
    """Read sessions of one line, on the gateway's shared read engine."""
    sessions = make_sessionmaker(engine)
    event.listen(sessions, "after_begin", LineSchema(line_id, default).enter)
    return sessions


@dataclass(frozen=True)
class StreamHooks:
    """What every line's stream hub shares with the process: one cap on open
    streams (the process's file descriptors), the metrics, who may stream."""
    limits: HubLimits
    slots: StreamSlots
    on_count: Callable[[str, int], None]  # (line id, that line's open streams)
    on_fanout: Callable[[float], None]
    on_overflow: Callable[[], None]
    authorised: Callable[[bytes], bool]
    on_hub: Callable[[StreamHub], None]  # a hub started (revocations reach it)


class LinePort:
    """One line's parts in the gateway."""

    def __init__(self, line: PlantLine, *, default: bool, settings: Settings, engine: Engine,
                 hooks: StreamHooks, rpc_pool=None):
        self.line = line
        self.default = default
        self.names = LineServices.of_line(line.id, default)
        self.settings = settings
        self.db = line_sessions(engine, line.id, default)
        self.hooks = hooks
        self.rpc = rpc_pool  # commands; created on first use unless handed one
        self.status_rpc = None  # status(): a small pool with a short timeout
        self.watch: ServiceWatch | None = None
        self.relay: EventRelay | None = None
        self.hub: StreamHub | None = None
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.line.id

    @property
    def layout(self):
        return self.line.layout

    @property
    def api_root(self) -> str:
        """Where the line's paths start."""
        return "/api" if self.default else f"/api/lines/{self.id}"

    def ideal_scale(self) -> float:
        """The line's ideal cycle times run SIM_SPEED times faster on a simulator."""
        return production_stats.ideal_scale(self.settings.replace(plc=self.line.plc))

    def of_line(self, obj: dict) -> dict:
        """``obj`` as the API shows it: naming its line."""
        return {**obj, "lineId": self.id}

    def read(self, query: Callable[[Any], T], otherwise: T) -> T:
        """``query(session)`` on the line's tables; ``otherwise`` when it has no
        tables yet (nothing has happened on it)."""
        try:
            with self.db() as session:
                return query(session)
        except LineNotReady:
            return otherwise

    def read_log(self, after: int, limit: int) -> list[dict]:
        """The line's event log after ``after``, as frames naming the line."""
        return read_log(self.db, after, limit, self.id)

    # -- the transport --------------------------------------------------------------

    def rpc_pool(self) -> RpcPool:
        with self._lock:
            if self.rpc is None:
                self.rpc = RpcPool(nameko_config(self.settings), timeout=self.settings.command_wait_seconds + 5)
        return self.rpc

    def status_pool(self) -> RpcPool:
        with self._lock:
            if self.status_rpc is None:
                self.status_rpc = RpcPool(nameko_config(self.settings), size=2, timeout=STATUS_RPC_TIMEOUT)
        return self.status_rpc

    def service_watch(self) -> ServiceWatch:
        """Presence and cached status of the line's services (``/readyz``, ``/metrics``, commands)."""
        def status_of(service: str) -> dict:
            with self.status_pool().client() as rpc:
                return getattr(rpc, service).status()

        with self._lock:
            if self.watch is None:
                self.watch = ServiceWatch(nameko_config(self.settings)["AMQP_URI"], status_of)
        return self.watch

    def service_status(self, service: str) -> tuple[dict | None, str | None]:
        """A service's ``status()`` (cached, shared), or why it could not be had."""
        return self.service_watch().status(service)

    # -- the live feed ----------------------------------------------------------------

    def event_relay(self) -> EventRelay:
        """The line's ``line_events`` consumer, started on first use; 503 until it is bound."""
        with self._lock:
            relay = self._relay()
        if not relay.start():
            raise ApiError(503, "UNAVAILABLE", f"the live event feed of line {self.id} is not connected yet")
        return relay

    def stream_hub(self) -> StreamHub:
        """The line's websocket StreamHub, started on first use and fed by its relay."""
        hooks = self.hooks
        with self._lock:
            if self.hub is None:
                self.hub = StreamHub(self.read_log, hooks.limits, slots=hooks.slots,
                                     on_count=lambda n: hooks.on_count(self.id, n),
                                     on_fanout=hooks.on_fanout, on_overflow=hooks.on_overflow,
                                     authorised=hooks.authorised).start()
                self._relay().add_listener(self.hub)
                hooks.on_hub(self.hub)
        return self.hub

    def _relay(self) -> EventRelay:
        if self.relay is None:
            # The line's controller publishes its events under its own service name.
            self.relay = EventRelay(nameko_config(self.settings)["AMQP_URI"],
                                    service=self.names.line_controller, line_id=self.id)
        return self.relay

    def close(self) -> None:
        for part in (self.relay, self.hub):
            if part is not None:
                part.stop()
        if self.watch is not None:
            self.watch.close()
        for pool in (self.rpc, self.status_rpc):
            if pool is not None:
                pool.close()
