"""Production figures over a time window: the line's output and each machine's
utilization, availability, performance, quality and OEE (``GET /api/stats``),
the machine-state timeline (``GET /api/stats/timeline``) and how often each
alarm code was raised (``GET /api/stats/alarms``).

They are read from the loop's rollup (``machine_state_interval``,
``machine_cycle``), from ``job.finished_at`` and from ``alarm.raised_at``, each
by an index over the window: never from the event log, so the cost follows the
window, not the length of the history. docs/stats.md defines every figure.

Time a machine has no recorded state for (before the loop first tracked it)
is outside its *observed* time and counts in no ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Connection

from shared.serialize import hourly, iso

MAX_WINDOW = timedelta(days=31)
DEFAULT_WINDOW = timedelta(hours=8)
TIMELINE_MAX_ITEMS = 10000


@dataclass(frozen=True)
class Window:
    start: datetime
    end: datetime
    now: datetime

    @property
    def observable_end(self) -> datetime:
        """Nothing is known about the future."""
        return min(self.end, self.now)


def _ratio(part: float, whole: float) -> float | None:
    return None if whole <= 0 else max(0.0, min(1.0, part / whole))


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


# Per machine, the intervals that overlap the window: those that began in it
# and the one that was open when it began (one per machine, found backwards on
# the (equipment_id, started_at) index), each clipped to the window.
_STATE_SECONDS_SQL = """
SELECT e.id AS equipment_id, i.state,
       sum(extract(epoch FROM LEAST(COALESCE(i.ended_at, :now), :end) - GREATEST(i.started_at, :start)))
         AS seconds
FROM equipment e
CROSS JOIN LATERAL (
    (SELECT state, started_at, ended_at FROM machine_state_interval
     WHERE equipment_id = e.id AND started_at < :start ORDER BY started_at DESC LIMIT 1)
    UNION ALL
    (SELECT state, started_at, ended_at FROM machine_state_interval
     WHERE equipment_id = e.id AND started_at >= :start AND started_at < :end)
) i
WHERE COALESCE(i.ended_at, :now) > :start AND LEAST(COALESCE(i.ended_at, :now), :end) > GREATEST(i.started_at, :start)
GROUP BY e.id, i.state
"""

# Each cycle carries its pieces' outcomes (the loop counts a piece in when it
# finishes), so this is one range scan of the (equipment_id, ended_at) index.
_CYCLES_SQL = """
SELECT e.id AS equipment_id, count(*) AS cycles,
       avg(extract(epoch FROM c.ended_at - c.started_at)) AS mean_seconds,
       percentile_disc(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM c.ended_at - c.started_at))
         AS p95_seconds,
       sum(c.good_pieces) AS good, sum(c.scrapped_pieces) AS bad
FROM equipment e
JOIN machine_cycle c ON c.equipment_id = e.id AND c.ended_at >= :start AND c.ended_at < :end
  AND NOT c.aborted
GROUP BY e.id
"""

_OUTPUT_SQL = """
SELECT date_trunc('hour', finished_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS hour,
       count(*) FILTER (WHERE status = 'COMPLETED') AS completed,
       count(*) FILTER (WHERE status = 'SCRAPPED') AS scrapped
FROM job
WHERE finished_at IS NOT NULL AND finished_at >= :start AND finished_at < :end
  AND status IN ('COMPLETED', 'SCRAPPED')
GROUP BY 1 ORDER BY 1
"""

# When tracking began: each machine's first interval, on its index.
_TRACKED_SINCE_SQL = """
SELECT min(f.started_at) AS since FROM equipment e CROSS JOIN LATERAL (
    SELECT started_at FROM machine_state_interval WHERE equipment_id = e.id
    ORDER BY started_at LIMIT 1) f
"""


def ideal_scale(settings) -> float:
    """The simulator plays the layout's cycle times SIM_SPEED times faster, so the
    ideal times run faster with it; a real PLC: 1."""
    return settings.sim_speed if settings.plc == "sim" and settings.sim_speed > 0 else 1.0


def production_figures(conn: Connection, layout, window: Window, *, ideal_scale: float = 1.0) -> dict:
    """``GET /api/stats``. ``ideal_scale`` divides the layout's ideal cycle times
    (the simulator plays the layout SIM_SPEED times faster)."""
    params = {"start": window.start, "end": window.observable_end, "now": window.now}
    seconds: dict[str, dict[str, float]] = {}
    if window.start < window.observable_end:
        for r in conn.execute(text(_STATE_SECONDS_SQL), params):
            seconds.setdefault(r.equipment_id, {})[r.state] = float(r.seconds or 0.0)
    cycles = {r.equipment_id: r for r in conn.execute(text(_CYCLES_SQL), params)}
    output = conn.execute(text(_OUTPUT_SQL), params).all()
    since = conn.execute(text(_TRACKED_SINCE_SQL)).scalar()

    equipment = []
    for spec in layout.equipment:
        by_state = seconds.get(spec.id, {})
        observed = sum(by_state.values())
        processing = by_state.get("PROCESSING", 0.0)
        c = cycles.get(spec.id)
        n = int(c.cycles) if c else 0
        ideal = spec.ideal_cycle_seconds / ideal_scale
        availability = _ratio(observed - by_state.get("FAULT", 0.0), observed)
        performance = _ratio(ideal * n, processing) if n else None
        quality = _ratio(float(c.good), float(c.good + c.bad)) if c and c.good + c.bad else None
        oee = (availability * performance * quality
               if None not in (availability, performance, quality) else None)
        equipment.append({
            "id": spec.id,
            "utilization": _round(_ratio(processing, observed)),
            "availability": _round(availability),
            "performance": _round(performance),
            "quality": _round(quality),
            "oee": _round(oee),
            "cycles": n,
            "meanCycleSeconds": _round(float(c.mean_seconds), 3) if c else None,
            "p95CycleSeconds": _round(float(c.p95_seconds), 3) if c else None,
            "idealCycleSeconds": _round(ideal, 3),
            "observedSeconds": _round(observed, 3),
            "secondsByState": {k: _round(v, 3) for k, v in sorted(by_state.items())},
        })

    completed = sum(r.completed for r in output)
    scrapped = sum(r.scrapped for r in output)
    line_from = max(window.start, since) if since is not None else window.observable_end
    line_hours = max(0.0, (window.observable_end - line_from).total_seconds()) / 3600
    return {
        "from": iso(window.start),
        "to": iso(window.end),
        "line": {
            "completed": completed,
            "scrapped": scrapped,
            "throughputPerHour": _round(completed / line_hours, 3) if line_hours > 0 else None,
            "scrapRate": _round(_ratio(scrapped, completed + scrapped)),
            "observedSeconds": _round(line_hours * 3600, 3),
        },
        "equipment": equipment,
        "hourly": hourly(window.start, window.end, {r.hour: r for r in output},
                         ("completed", "scrapped")),
    }


_TIMELINE_SQL = """
SELECT i.equipment_id, i.state, GREATEST(i.started_at, :start) AS "from",
       LEAST(COALESCE(i.ended_at, :now), :end) AS "to"
FROM equipment e
CROSS JOIN LATERAL (
    (SELECT equipment_id, state, started_at, ended_at FROM machine_state_interval
     WHERE equipment_id = e.id AND started_at < :start ORDER BY started_at DESC LIMIT 1)
    UNION ALL
    (SELECT equipment_id, state, started_at, ended_at FROM machine_state_interval
     WHERE equipment_id = e.id AND started_at >= :start AND started_at < :end
     ORDER BY started_at LIMIT :limit)
) i
WHERE (CAST(:equipment AS text) IS NULL OR e.id = :equipment)
  AND LEAST(COALESCE(i.ended_at, :now), :end) > GREATEST(i.started_at, :start)
ORDER BY i.equipment_id, 3
LIMIT :limit
"""


def timeline(conn: Connection, window: Window, equipment_id: str | None = None,
             limit: int = TIMELINE_MAX_ITEMS) -> dict:
    """``GET /api/stats/timeline``: per machine, its states over the window, in
    order, not overlapping, clipped to the window (and to now). ``truncated``
    says the window held more than ``limit`` intervals: ask for a shorter one."""
    rows = conn.execute(text(_TIMELINE_SQL), {
        "start": window.start, "end": window.observable_end, "now": window.now,
        "equipment": equipment_id, "limit": limit + 1}).all()
    return {"items": [{"equipmentId": r.equipment_id, "state": r.state, "from": iso(r[2]),
                       "to": iso(r[3])} for r in rows[:limit]],
            "truncated": len(rows) > limit}


_ALARM_COUNTS_SQL = """
SELECT code, count(*) AS count, max(raised_at) AS last_raised_at,
       count(*) FILTER (WHERE status IN ('RAISED', 'ACKNOWLEDGED', 'SHELVED')) AS open
FROM alarm WHERE raised_at >= :start AND raised_at < :end
GROUP BY code ORDER BY count(*) DESC, code
"""


def alarm_counts(conn: Connection, window: Window) -> dict:
    """``GET /api/stats/alarms``: how often each alarm code was raised in the window."""
    rows = conn.execute(text(_ALARM_COUNTS_SQL), {"start": window.start, "end": window.end})
    return {"from": iso(window.start), "to": iso(window.end),
            "items": [{"code": r.code, "count": r.count, "open": r.open,
                       "lastRaisedAt": iso(r.last_raised_at)} for r in rows]}


# -- tables for a person (``linectl shell``: stats(), timeline()) ---------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _num(value: float | None, fmt: str = "{:.1f}") -> str:
    return "-" if value is None else fmt.format(value)


def figures_table(figures: dict) -> str:
    line = figures["line"]
    out = [f"{figures['from']} .. {figures['to']}",
           f"line: completed {line['completed']}, scrapped {line['scrapped']}, "
           f"throughput {_num(line['throughputPerHour'])}/h, scrap rate {_pct(line['scrapRate'])}",
           "",
           f"{'machine':<8} {'util':>7} {'avail':>7} {'perf':>7} {'qual':>7} {'OEE':>7} "
           f"{'cycles':>7} {'mean s':>8} {'p95 s':>8}"]
    for e in figures["equipment"]:
        out.append(f"{e['id']:<8} {_pct(e['utilization']):>7} {_pct(e['availability']):>7} "
                   f"{_pct(e['performance']):>7} {_pct(e['quality']):>7} {_pct(e['oee']):>7} "
                   f"{e['cycles']:>7} {_num(e['meanCycleSeconds'], '{:.2f}'):>8} "
                   f"{_num(e['p95CycleSeconds'], '{:.2f}'):>8}")
    return "\n".join(out)


def timeline_table(result: dict) -> str:
    out = [f"{'machine':<8} {'state':<15} {'from':<27} {'to':<27} {'seconds':>9}"]
    for i in result["items"]:
        start = datetime.fromisoformat(i["from"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(i["to"].replace("Z", "+00:00"))
        out.append(f"{i['equipmentId']:<8} {i['state']:<15} {i['from']:<27} {i['to']:<27} "
                   f"{(end - start).total_seconds():>9.1f}")
    if result.get("truncated"):
        out.append("… more in this window: ask for a shorter one")
    return "\n".join(out)
