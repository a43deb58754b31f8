"""One handler per message class: ``handler(message, ctx) -> result dict | None``.

A handler reads what it needs through ``ctx.db`` (:class:`DBState`), validates,
and applies transitions; raising :class:`~services.line_controller.dbstate.Rejected`
rolls the whole transaction back. Hardware requests go to ``ctx.requests`` (sent
after the commit), follow-up messages to ``ctx.follow_ups``. Each module keeps a
table ``HANDLERS`` from message class to handler; :data:`HANDLERS` joins them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from shared.layout import Layout

from ..dbstate import DBState
from ..hardware_port import HardwareRequest
from ..messages import MESSAGE_TYPES, EventLoopMessage, split_actor


@dataclass(slots=True)
class HandlerContext:
    """What a handler works with, and what it leaves for the loop."""
    db: DBState
    message: EventLoopMessage  # the envelope (id, type, actor) of the message handled
    layout: Layout
    # Left for the loop, after the commit:
    requests: list[HardwareRequest] = field(default_factory=list)  # sent to the hardware
    follow_ups: list[EventLoopMessage] = field(default_factory=list)  # enqueued
    outcome: str | None = None  # None → HANDLED; STALE for a late worker result
    cycle_bounds: list[datetime] = field(default_factory=list)  # a tick's open cycles' bounds to come
    target: tuple[str, str | None] = ("command", None)  # what a command's audit row names
    # A cycle this many times its cycleSeconds past its start is overdue (settings).
    cycle_overdue_factor: float = 3.0
    # Since when the loop has heard the hardware's events (None: all along). Before
    # that it was not running, or cut off from the database, and a cycle's end may
    # still be on its way: an overdue clock starts no earlier. While ``recovering``
    # (the check against the PLC not yet handled) no cycle is judged at all.
    heard_since: datetime | None = None
    recovering: bool = False
    # When the hardware saw the last PLC link ("plc") and robot fault ("robot") edges
    # the loop applied: an edge seen earlier that arrives after them is stale.
    edges_seen: dict[str, datetime] = field(default_factory=dict)

    @property
    def actor(self) -> str:
        return split_actor(self.message.actor)[0] or "system"


Handler = Callable[[object, HandlerContext], dict | None]

from . import commands, downtime, recovery, results, signals, timers  # noqa: E402

HANDLERS: dict[type, Handler] = {**commands.HANDLERS, **signals.HANDLERS, **results.HANDLERS,
                                 **timers.HANDLERS, **recovery.HANDLERS, **downtime.HANDLERS}
assert set(HANDLERS) == set(MESSAGE_TYPES.values()), "a message class without a handler"
