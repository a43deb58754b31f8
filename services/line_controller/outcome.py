"""How a message ended (:class:`Outcome`) and a caller's handle on one still
in the loop's inbox (:class:`Pending`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import eventlet
from eventlet.event import Event

from . import messages as m


@dataclass
class Outcome:
    """How a message ended; :meth:`to_reply` is the one reply shape of a command."""
    message_id: str
    status: str  # HANDLED | REJECTED | STALE | DUPLICATE | FAILED | QUEUED
    result: dict | None = None
    error: dict | None = None
    # The recorded outcome of an earlier delivery of this id (a client's retry):
    # the gateway answers 200 where the first answer was 201.
    replayed: bool = False

    def to_reply(self) -> dict:
        return {"commandId": self.message_id, "status": self.status, "result": self.result,
                "error": self.error, "replayed": self.replayed}

    @classmethod
    def refused(cls, message_id: str, code: str, message: str, status: str = "REJECTED") -> Outcome:
        return cls(message_id, status, error={"code": code, "message": message})

    @classmethod
    def from_row(cls, row, *, replayed: bool = False) -> Outcome:
        error = {"code": row.error_code, "message": row.error_message or ""} if row.error_code else None
        return cls(row.id, row.status, row.result, error, replayed)


@dataclass
class Pending:
    """A caller's handle on an enqueued message."""
    message: m.EventLoopMessage
    done: Event = field(default_factory=Event)
    replay: bool = False  # another caller already waits on this id

    def wait(self, timeout: float | None) -> Outcome | None:
        """The outcome, or None when ``timeout`` ran out (the message still runs)."""
        with eventlet.Timeout(timeout, False):
            return self.done.wait()
        return None
