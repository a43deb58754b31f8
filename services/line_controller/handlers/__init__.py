"""One handler per message type: ``handler(message, ctx) -> result dict | None``.

A handler reads what it needs through ``ctx.db`` (:class:`DBState`), validates,
and applies transitions; raising :class:`~services.line_controller.dbstate.Rejected`
rolls the whole transaction back. Hardware requests go to ``ctx.requests`` (sent
after the commit), follow-up messages to ``ctx.follow_ups``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..dbstate import DBState
from ..messages import split_actor


@dataclass
class HandlerContext:
    db: DBState
    message: object  # EventLoopMessage
    layout: object  # shared.layout.Layout
    executor: object  # ActionExecutor
    requests: list = field(default_factory=list)
    follow_ups: list = field(default_factory=list)
    outcome: str | None = None  # None → HANDLED; STALE for a late worker result
    target: tuple[str, str | None] = ("command", None)

    @property
    def actor(self) -> str:
        return split_actor(self.message.actor)[0] or "system"


from . import commands, recovery, results, signals, timers  # noqa: E402

HANDLERS = {**commands.HANDLERS, **signals.HANDLERS, **results.HANDLERS, **timers.HANDLERS,
            **recovery.HANDLERS}
