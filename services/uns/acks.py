"""Which of an edge node's messages the broker has acknowledged (store and forward).

Every message belongs to a *unit*: the events of one loop transaction, live or
historical, after seq ``a`` up to seq ``upto``. A unit is acknowledged when the
broker has acknowledged (PUBACK) every one of its QoS 1 messages; ``acked``
moves up over acknowledged units only in seq order, so a restart forwards
everything after it again and nothing before it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Unit:
    upto: int
    outstanding: set[int] = field(default_factory=set)


class Acknowledgements:
    def __init__(self, acked: int = 0):
        self.acked = acked
        self.units: dict[int, Unit] = {}  # by the seq the unit starts after
        self.unit_of_mid: dict[int, int] = {}

    def in_flight(self) -> int:
        return len(self.units)

    def sent(self, span: tuple[int, int], mids: list[int]) -> None:
        """The unit ``span`` (after, upto) published as the messages ``mids``."""
        self.units[span[0]] = Unit(span[1], set(mids))
        for mid in mids:
            self.unit_of_mid[mid] = span[0]
        self._advance()

    def acknowledged(self, mid: int) -> None:
        start = self.unit_of_mid.pop(mid, None)
        unit = self.units.get(start) if start is not None else None
        if unit is not None:
            unit.outstanding.discard(mid)
            self._advance()

    def clear(self) -> None:
        """A session ended: what it had in flight is forwarded again on the next."""
        self.units.clear()
        self.unit_of_mid.clear()

    def _advance(self) -> None:
        unit = self.units.get(self.acked)
        while unit is not None and not unit.outstanding:
            del self.units[self.acked]
            self.acked = unit.upto
            unit = self.units.get(self.acked)
