"""A line's stops, their Pareto by reason, and its state timeline with the
calendar's states laid over it (PRODUCT.md, "Shifts, downtime and OEE";
docs/oee.md). Reads only; the loop writes ``line_state_interval``."""

from __future__ import annotations

from datetime import datetime

from shared.oee import UNASSIGNED, Stretch, intersect, minus, read_planned, read_stretches, seconds, union
from shared.shift_calendar import Calendar
from shared.wire import iso


def stops(conn, start: datetime, end: datetime, now: datetime, microstop_seconds: float,
          unassigned: bool | None = None) -> list[Stretch]:
    """The stops (not micro-stops) that overlap [start, end), in time order."""
    found = [s for s in read_stretches(conn, start, end, now, down_only=True) if s.is_stop(microstop_seconds)]
    if unassigned is not None:
        found = [s for s in found if (s.reason_code is None) == unassigned]
    return found


def pareto(found: list[Stretch], start: datetime, end: datetime) -> list[dict]:
    """Time (within the window) and count per reason, the most time first, with the
    cumulative share of time; stops without a reason are ``UNASSIGNED``."""
    per: dict[str, list[float]] = {}
    for s in found:
        t = seconds(intersect([(s.start, s.end)], [(start, end)]))
        entry = per.setdefault(s.reason_code or UNASSIGNED, [0.0, 0])
        entry[0] += t
        entry[1] += 1
    total = sum(t for t, _ in per.values())
    items, running = [], 0.0
    for code, (t, n) in sorted(per.items(), key=lambda kv: (-kv[1][0], kv[0])):
        running += t
        items.append({"reasonCode": code, "seconds": round(t, 3), "stops": n,
                      "cumulativeShare": round(running / total, 6) if total else None})
    return items


def timeline(conn, calendar: Calendar, start: datetime, end: datetime, now: datetime) -> list[dict]:
    """The line's states over [start, min(end, now)): outside every shift
    ``NOT_SCHEDULED``, in a break or planned downtime ``PLANNED_DOWN``, else what
    the loop recorded (``RUNNING``, ``IDLE``, ``DOWN`` with its cause). Time
    before the line's first record has no item."""
    end = min(end, now)
    if start >= end:
        return []
    shifts = calendar.instances(start, end)
    scheduled = union(intersect([(i.start, i.end) for i in shifts], [(start, end)]))
    planned = union(intersect([b for i in shifts for b in i.breaks] + read_planned(conn, start, end), scheduled))
    pieces = []
    for s in read_stretches(conn, start, end, now):
        span = intersect([(s.start, s.end)], [(start, end)])
        for a, b in intersect(span, minus(scheduled, planned)):
            pieces.append((a, b, s.state, s.cause, s.equipment_id))
        for a, b in intersect(span, planned):
            pieces.append((a, b, "PLANNED_DOWN", None, None))
        for a, b in minus(span, scheduled):
            pieces.append((a, b, "NOT_SCHEDULED", None, None))
    merged: list[list] = []
    for a, b, state, cause, equipment in sorted(pieces):
        last = merged[-1] if merged else None
        if last and last[1] == a and last[2:] == [state, cause, equipment]:
            last[1] = b
        else:
            merged.append([a, b, state, cause, equipment])
    return [{"state": state, "cause": cause, "equipmentId": equipment, "from": iso(a), "to": iso(b)}
            for a, b, state, cause, equipment in merged]
