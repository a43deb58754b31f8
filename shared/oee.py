"""OEE per ISO 22400-2 from a line's records (PRODUCT.md, "Shifts, downtime and
OEE"; docs/oee.md has every definition and a worked example).

Per item (a shift instance, a local day or an hour, clipped to the window and
to now), within the plant calendar's shift time:

- planned busy time PBT = shift time − planned downtime (breaks, and planned
  downtime added by API);
- actual production time APT = PBT − down time (the stops' time within PBT);
- availability A = APT / PBT; performance P = Σ produced × ideal cycle time / APT;
  quality Q = good / produced; OEE = A × P × Q;
- MTBF = APT / stops; MTTR = down time / stops.

A stop is a ``DOWN`` stretch of at least the micro-stop threshold, or any
``CONTROLLER_DOWN`` (nobody watched the line then); a shorter one is a
micro-stop: counted and summed, its time a loss of performance, not of
availability. A piece is produced when it finished (completed or scrapped)
within the item's shift time. Every item carries these inputs."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text

from shared.shift_calendar import Calendar, ShiftInstance
from shared.wire import iso

BY = ("shift", "day", "hour")
CONTROLLER_DOWN = "CONTROLLER_DOWN"
UNASSIGNED = "UNASSIGNED"
Span = tuple[datetime, datetime]


# -- spans --------------------------------------------------------------------------


def union(spans) -> list[Span]:
    out: list[list[datetime]] = []
    for a, b in sorted(s for s in spans if s[1] > s[0]):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def intersect(xs: list[Span], ys: list[Span]) -> list[Span]:
    return [(max(a, c), min(b, d)) for a, b in xs for c, d in ys if max(a, c) < min(b, d)]


def minus(xs: list[Span], ys: list[Span]) -> list[Span]:
    out = []
    for a, b in xs:
        cut = a
        for c, d in union(ys):
            if d <= cut or c >= b:
                continue
            if c > cut:
                out.append((cut, c))
            cut = max(cut, d)
        if cut < b:
            out.append((cut, b))
    return out


def seconds(spans) -> float:
    return sum((b - a).total_seconds() for a, b in spans)


# -- the records ----------------------------------------------------------------------


@dataclass(frozen=True)
class Stretch:
    id: int
    state: str
    cause: str | None
    equipment_id: str | None
    start: datetime
    end: datetime  # an open stretch: now
    open: bool
    reason_code: str | None
    comment: str | None
    assigned_by: str | None
    assigned_at: datetime | None
    split_from: int | None

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def is_stop(self, microstop_seconds: float) -> bool:
        return self.state == "DOWN" and (self.seconds >= microstop_seconds or self.cause == CONTROLLER_DOWN)

    def to_json(self) -> dict:
        return {"id": self.id, "equipmentId": self.equipment_id, "from": iso(self.start),
                "to": None if self.open else iso(self.end), "seconds": round(self.seconds, 3),
                "cause": self.cause, "reasonCode": self.reason_code, "comment": self.comment,
                "assignedBy": self.assigned_by, "assignedAt": iso(self.assigned_at) if self.assigned_at else None,
                "splitFrom": self.split_from}


def read_stretches(conn, start: datetime, end: datetime, now: datetime, down_only: bool = False) -> list[Stretch]:
    rows = conn.execute(text(
        "SELECT * FROM line_state_interval WHERE started_at < :e AND (ended_at IS NULL OR ended_at > :s)"
        + (" AND state = 'DOWN'" if down_only else "") + " ORDER BY started_at, id"),
        {"s": start, "e": end}).all()
    return [Stretch(r.id, r.state, r.cause, r.equipment_id, r.started_at, r.ended_at or max(now, r.started_at),
                    r.ended_at is None, r.reason_code, r.comment, r.assigned_by, r.assigned_at, r.split_from)
            for r in rows]


def read_planned(conn, start: datetime, end: datetime) -> list[Span]:
    return [(r.started_at, r.ended_at) for r in conn.execute(text(
        "SELECT started_at, ended_at FROM planned_downtime WHERE started_at < :e AND ended_at > :s"),
        {"s": start, "e": end})]


def read_output(conn, spans: list[tuple[int, Span]]) -> dict[int, dict[str, list[int]]]:
    """Per item number: product → [good, scrapped] of the pieces that finished in its spans."""
    out: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    if not spans:
        return out
    rows = conn.execute(text(
        "SELECT s.n, w.product_id, j.status, count(*) AS pieces "
        "FROM unnest(CAST(:n AS int[]), CAST(:a AS timestamptz[]), CAST(:b AS timestamptz[])) AS s(n, a, b) "
        "JOIN job j ON j.finished_at >= s.a AND j.finished_at < s.b AND j.status IN ('COMPLETED', 'SCRAPPED') "
        "JOIN work_order w ON w.id = j.work_order_id GROUP BY s.n, w.product_id, j.status"),
        {"n": [n for n, _ in spans], "a": [s[0] for _, s in spans], "b": [s[1] for _, s in spans]})
    for r in rows:
        out[r.n][r.product_id][0 if r.status == "COMPLETED" else 1] += r.pieces
    return out


# -- the items ------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime
    shift: str | None  # by=shift: the shift's name
    day: str | None  # by=shift: the local date it starts on
    scheduled: list[Span]  # shift time within the period
    breaks: list[Span]


def periods(calendar: Calendar, start: datetime, end: datetime, by: str) -> list[Period]:
    shifts = calendar.instances(start, end)
    if by == "shift":
        return [p for i in shifts if (p := _shift_period(i, start, end))]
    step = calendar.day_start(start) if by == "day" else calendar.hour_start(start)
    out = []
    while step < end:
        nxt = calendar.next_day(step) if by == "day" else step + timedelta(hours=1)
        a, b = max(step, start), min(nxt, end)
        out.append(Period(a, b, None, None, intersect([(i.start, i.end) for i in shifts], [(a, b)]),
                          intersect([s for i in shifts for s in i.breaks], [(a, b)])))
        step = nxt
    return out


def _shift_period(instance: ShiftInstance, start: datetime, end: datetime) -> Period | None:
    a, b = max(instance.start, start), min(instance.end, end)
    if a >= b:
        return None
    return Period(a, b, instance.name, instance.day.isoformat(), [(a, b)], intersect(list(instance.breaks), [(a, b)]))


def oee_items(conn, calendar: Calendar, ideals: dict[str, float | None], start: datetime, end: datetime,
              by: str, now: datetime, microstop_seconds: float) -> list[dict]:
    """The OEE items of one line over [start, end), clipped to now."""
    end = min(end, now)
    if start >= end:
        return []
    items = periods(calendar, start, end, by)
    stretches = read_stretches(conn, start, end, now, down_only=True)
    planned = read_planned(conn, start, end)
    output = read_output(conn, [(n, s) for n, p in enumerate(items) for s in p.scheduled])
    # Stretches do not overlap, so in start order their ends are in order too: each
    # period looks only at those that reach into it.
    starts, ends = [s.start for s in stretches], [s.end for s in stretches]
    return [figures(p, stretches[bisect_right(ends, p.start):bisect_left(starts, p.end)], planned,
                    output.get(n, {}), ideals, microstop_seconds)
            for n, p in enumerate(items)]


def figures(period: Period, stretches: list[Stretch], planned: list[Span], output: dict[str, list[int]],
            ideals: dict[str, float | None], microstop_seconds: float) -> dict:
    planned_down = union(intersect(period.breaks + planned, period.scheduled))
    busy = minus(period.scheduled, planned_down)
    stops = [(s, seconds(intersect([(s.start, s.end)], busy))) for s in stretches if s.state == "DOWN"]
    lost = [(s, t) for s, t in stops if t > 0]
    real = [t for s, t in lost if s.is_stop(microstop_seconds)]
    micro = [t for s, t in lost if not s.is_stop(microstop_seconds)]
    produced = {p: sum(c) for p, c in output.items()}
    good = sum(c[0] for c in output.values())
    unknown = sorted(p for p, n in produced.items() if n and ideals.get(p) is None)
    inputs = {
        "shiftSeconds": seconds(period.scheduled), "plannedDowntimeSeconds": seconds(planned_down),
        "downSeconds": sum(real), "stops": len(real), "microStops": len(micro), "microStopSeconds": sum(micro),
        "produced": sum(produced.values()), "good": good, "scrapped": sum(produced.values()) - good,
        "idealSeconds": sum(n * (ideals.get(p) or 0) for p, n in produced.items()),
        "producedByProduct": dict(sorted(produced.items())), "productsWithoutIdeal": unknown,
    }
    return {"from": iso(period.start), "to": iso(period.end), "shift": period.shift, "date": period.day,
            **ratios(inputs, complete=not unknown)}


def ratios(inputs: dict, complete: bool = True) -> dict:
    """The figures from their inputs (also how the plant's are made from the lines' sums)."""
    pbt = inputs["shiftSeconds"] - inputs["plannedDowntimeSeconds"]
    apt = pbt - inputs["downSeconds"]
    a = apt / pbt if pbt > 0 else None
    p = inputs["idealSeconds"] / apt if apt > 0 and complete else None
    q = inputs["good"] / inputs["produced"] if inputs["produced"] else None
    stops = inputs["stops"]
    out = {**{k: round(v, 3) if isinstance(v, float) else v for k, v in inputs.items()},
           "plannedBusySeconds": round(pbt, 3), "actualProductionSeconds": round(apt, 3),
           "availability": _r(a), "performance": _r(p), "quality": _r(q),
           "oee": _r(a * p * q) if None not in (a, p, q) else None,
           "mtbfSeconds": round(apt / stops, 3) if stops else None,
           "mttrSeconds": round(inputs["downSeconds"] / stops, 3) if stops else None}
    return out


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


SUMMED = ("shiftSeconds", "plannedDowntimeSeconds", "downSeconds", "stops", "microStops", "microStopSeconds",
          "produced", "good", "scrapped", "idealSeconds")


def summed(items: list[dict]) -> dict:
    """Several items' inputs added up, and their figures from those sums."""
    inputs = {k: sum(i[k] for i in items) for k in SUMMED}
    by_product: dict[str, int] = defaultdict(int)
    for i in items:
        for p, n in i["producedByProduct"].items():
            by_product[p] += n
    unknown = sorted({p for i in items for p in i["productsWithoutIdeal"]})
    inputs.update(producedByProduct=dict(sorted(by_product.items())), productsWithoutIdeal=unknown)
    return ratios(inputs, complete=not unknown)
