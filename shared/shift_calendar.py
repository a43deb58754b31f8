"""The plant's calendar (PRODUCT.md, "Shifts, downtime and OEE"): its time zone,
its shifts by weekday, their breaks, its holidays, and its tree of downtime
reasons, from the plant file.

A shift instance is computed in the plant's zone with :mod:`zoneinfo`: its start
and end are wall-clock times on a local date, turned into instants by the zone's
rules, so a night shift over a daylight-saving change lasts 7 or 9 hours, and a
shift whose end is not after its start ends on the next day. A wall-clock time
the change skips (02:30 on the spring change) is read with the offset before
the change (PEP 495, ``fold=0``), one that occurs twice as its first occurrence.
Durations (a break's minutes) are elapsed time. Without a calendar the plant
has one shift, ``day``, from midnight to midnight every day, in UTC.

Nothing here is written by a timer: shift and break boundaries are computed
whenever they are asked for, from the file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
CALENDAR_KEYS = ("timezone", "shifts", "breaks", "holidays", "downtimeReasons")
SHIFT_KEYS = {"name", "start", "end", "days"}
BREAK_KEYS = {"shift", "start", "minutes"}
REASON_KEYS = {"code", "parent", "planned", "names"}
LANGUAGES = ("zh-CN", "en")
REASON_CODE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
SHIFT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _-]{0,31}$")
CLOCK = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
ALL_DAY = "day"  # the one shift of a plant without a calendar


class CalendarError(ValueError):
    """A calendar that cannot be used: ``str(err)`` names the key and what is wrong."""


@dataclass(frozen=True)
class Shift:
    name: str
    start: time
    end: time  # not after start: the shift ends on the next day
    days: frozenset[int]  # date.weekday() numbers

    @property
    def crosses_midnight(self) -> bool:
        return self.end <= self.start


@dataclass(frozen=True)
class Break:
    shift: str
    start: time
    minutes: int


@dataclass(frozen=True)
class Reason:
    code: str
    parent: str | None
    planned: bool
    names: dict[str, str]

    def to_json(self) -> dict:
        return {"code": self.code, "parent": self.parent, "planned": self.planned, "names": dict(self.names)}


DEFAULT_REASONS = tuple(Reason(code, None, planned, {"zh-CN": zh, "en": en}) for code, planned, zh, en in (
    ("MECHANICAL", False, "机械故障", "Mechanical failure"), ("ELECTRICAL", False, "电气故障", "Electrical failure"),
    ("MATERIAL", False, "缺料", "No material"), ("QUALITY", False, "质量问题", "Quality problem"),
    ("OPERATOR", False, "人员", "Operator"), ("OTHER", False, "其他", "Other"),
    ("CHANGEOVER", True, "换型", "Changeover"), ("MAINTENANCE", True, "计划保养", "Planned maintenance")))


@dataclass(frozen=True)
class ShiftInstance:
    """One shift on one local date: ``start``/``end`` are UTC instants, ``breaks``
    the (start, end) instants of its breaks, inside it."""
    name: str
    day: date  # the local date it starts on
    start: datetime
    end: datetime
    breaks: tuple[tuple[datetime, datetime], ...] = ()

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def to_json(self) -> dict:
        def iso(t: datetime) -> str:
            return t.astimezone(UTC).isoformat().replace("+00:00", "Z")
        return {"name": self.name, "date": self.day.isoformat(), "from": iso(self.start), "to": iso(self.end),
                "seconds": self.seconds,
                "breaks": [{"from": iso(a), "to": iso(b)} for a, b in self.breaks]}


@dataclass(frozen=True)
class Calendar:
    zone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    shifts: tuple[Shift, ...] = ()
    breaks: tuple[Break, ...] = ()
    holidays: frozenset[date] = frozenset()
    reasons: tuple[Reason, ...] = ()

    @property
    def timezone(self) -> str:
        return self.zone.key

    @property
    def reason_tree(self) -> tuple[Reason, ...]:
        """The plant's reasons, else a small default tree (a stop can always be given one)."""
        return self.reasons or DEFAULT_REASONS

    def reason(self, code: str) -> Reason | None:
        return next((r for r in self.reason_tree if r.code == code), None)

    def _shifts(self) -> tuple[Shift, ...]:
        if self.shifts:
            return self.shifts
        return (Shift(ALL_DAY, time(0), time(0), frozenset(range(7))),)

    def instances(self, start: datetime, end: datetime) -> list[ShiftInstance]:
        """The shift instances that overlap [start, end), in time order."""
        first = start.astimezone(self.zone).date() - timedelta(days=1)  # a shift from the day before
        last = end.astimezone(self.zone).date()
        found = [i for i in self._between(first, last) if i.end > start and i.start < end]
        return sorted(found, key=lambda i: (i.start, i.name))

    def _between(self, first: date, last: date) -> Iterator[ShiftInstance]:
        day = first
        while day <= last:
            if day not in self.holidays:
                for shift in self._shifts():
                    if day.weekday() in shift.days:
                        yield self._instance(shift, day)
            day += timedelta(days=1)

    def _at(self, day: date, clock: time) -> datetime:
        """A wall-clock time on a local date, as a UTC instant (the zone's rules)."""
        return datetime.combine(day, clock, tzinfo=self.zone).astimezone(UTC)

    def _instance(self, shift: Shift, day: date) -> ShiftInstance:
        start = self._at(day, shift.start)
        end = self._at(day + timedelta(days=1) if shift.crosses_midnight else day, shift.end)
        breaks = []
        for brk in self.breaks:
            if brk.shift != shift.name:
                continue
            # A break before the shift's start on the clock is on the shift's second day.
            on = day + timedelta(days=1) if shift.crosses_midnight and brk.start < shift.start else day
            b_start = self._at(on, brk.start)
            b_end = min(b_start + timedelta(minutes=brk.minutes), end)
            if start <= b_start < end:
                breaks.append((b_start, b_end))
        return ShiftInstance(shift.name, day, start, end, tuple(sorted(breaks)))

    def day_start(self, when: datetime) -> datetime:
        """The start of the local day ``when`` falls on (UTC instant)."""
        return self._at(when.astimezone(self.zone).date(), time(0))

    def next_day(self, day_start: datetime) -> datetime:
        return self._at(day_start.astimezone(self.zone).date() + timedelta(days=1), time(0))

    def hour_start(self, when: datetime) -> datetime:
        local = when.astimezone(self.zone)
        return local.replace(minute=0, second=0, microsecond=0).astimezone(UTC)


def parse_calendar(data: dict, where: str) -> Calendar:
    """The calendar keys of a plant file's mapping (absent keys: their defaults)."""
    zone = _zone(data.get("timezone", "UTC"), f"{where}: timezone")
    shifts = tuple(_shift(entry, f"{where}: shifts[{n}]") for n, entry in
                   enumerate(_list(data.get("shifts"), f"{where}: shifts"), 1))
    names = [s.name for s in shifts]
    for n, name in enumerate(names, 1):
        if name in names[:n - 1]:
            raise CalendarError(f"{where}: shifts[{n}].name: {name!r} is already another shift's name")
    breaks = tuple(_break(entry, f"{where}: breaks[{n}]", {s.name: s for s in shifts}) for n, entry in
                   enumerate(_list(data.get("breaks"), f"{where}: breaks"), 1))
    holidays = frozenset(_date(value, f"{where}: holidays[{n}]") for n, value in
                         enumerate(_list(data.get("holidays"), f"{where}: holidays"), 1))
    reasons = _reasons(_list(data.get("downtimeReasons"), f"{where}: downtimeReasons"), f"{where}: downtimeReasons")
    return Calendar(zone, shifts, breaks, holidays, reasons)


def _list(value, where: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CalendarError(f"{where}: expected a list")
    return value


def _mapping(entry, keys: set[str], where: str) -> dict:
    if not isinstance(entry, dict):
        raise CalendarError(f"{where}: expected a mapping with {', '.join(sorted(keys))}")
    unknown = sorted(set(map(str, entry)) - keys)
    if unknown:
        raise CalendarError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(sorted(keys))})")
    return entry


def _zone(value, where: str) -> ZoneInfo:
    if not isinstance(value, str) or not value.strip():
        raise CalendarError(f"{where}: expected an IANA time zone name such as Europe/Berlin")
    try:
        return ZoneInfo(value.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise CalendarError(f"{where}: {value!r} is not an IANA time zone") from None


def _clock(value, where: str) -> time:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
        value = f"{value // 60:02d}:{value % 60:02d}"  # YAML 1.1 reads 06:00 as a sexagesimal 360
    if not isinstance(value, str) or not CLOCK.match(value.strip()):
        raise CalendarError(f"{where}: expected a time of day HH:MM, got {value!r}")
    hours, minutes = value.strip().split(":")
    return time(int(hours), int(minutes))


def _shift(entry, where: str) -> Shift:
    entry = _mapping(entry, SHIFT_KEYS, where)
    for key in ("name", "start", "end"):
        if key not in entry:
            raise CalendarError(f"{where}: missing {key!r}")
    name = entry["name"]
    if not isinstance(name, str) or not SHIFT_NAME.match(name):
        raise CalendarError(f"{where}.name: expected 1..32 letters, digits, spaces, '_' or '-', got {name!r}")
    days = entry.get("days", list(DAYS))
    if not isinstance(days, list) or not days:
        raise CalendarError(f"{where}.days: expected a list of {', '.join(DAYS)}")
    numbers = set()
    for day in days:
        if not isinstance(day, str) or day.lower() not in DAYS:
            raise CalendarError(f"{where}.days: {day!r} is not one of {', '.join(DAYS)}")
        numbers.add(DAYS.index(day.lower()))
    start, end = _clock(entry["start"], f"{where}.start"), _clock(entry["end"], f"{where}.end")
    return Shift(name, start, end, frozenset(numbers))


def _break(entry, where: str, shifts: dict[str, Shift]) -> Break:
    entry = _mapping(entry, BREAK_KEYS, where)
    for key in ("shift", "start", "minutes"):
        if key not in entry:
            raise CalendarError(f"{where}: missing {key!r}")
    shift = shifts.get(entry["shift"])
    if shift is None:
        raise CalendarError(f"{where}.shift: {entry['shift']!r} is not a shift of the calendar")
    minutes = entry["minutes"]
    if not isinstance(minutes, int) or isinstance(minutes, bool) or not 1 <= minutes <= 240:
        raise CalendarError(f"{where}.minutes: expected a whole number of minutes 1..240")
    start = _clock(entry["start"], f"{where}.start")
    # On the clock, the break must begin and end within its shift.
    offset = _minutes_after(shift.start, start)
    length = _minutes_after(shift.start, shift.end) or 24 * 60
    if offset + minutes > length:
        raise CalendarError(f"{where}: the break {start:%H:%M} + {minutes} min is not within shift "
                            f"{shift.name} ({shift.start:%H:%M}-{shift.end:%H:%M})")
    return Break(shift.name, start, minutes)


def _minutes_after(a: time, b: time) -> int:
    return ((b.hour * 60 + b.minute) - (a.hour * 60 + a.minute)) % (24 * 60)


def _date(value, where: str) -> date:
    if isinstance(value, date) and not isinstance(value, datetime):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError:
        raise CalendarError(f"{where}: expected a date YYYY-MM-DD, got {value!r}") from None


def _reasons(entries: list, where: str) -> tuple[Reason, ...]:
    reasons: list[Reason] = []
    for n, entry in enumerate(entries, 1):
        at = f"{where}[{n}]"
        entry = _mapping(entry, REASON_KEYS, at)
        code = entry.get("code")
        if not isinstance(code, str) or not REASON_CODE.match(code):
            raise CalendarError(f"{at}.code: expected an upper-case code ({REASON_CODE.pattern}), got {code!r}")
        if any(r.code == code for r in reasons):
            raise CalendarError(f"{at}.code: {code!r} is already another reason's code")
        parent = entry.get("parent")
        if parent is not None and not any(r.code == parent for r in reasons):
            raise CalendarError(f"{at}.parent: {parent!r} is not a reason listed before it")
        planned = entry.get("planned", False)
        if not isinstance(planned, bool):
            raise CalendarError(f"{at}.planned: expected true or false")
        names = entry.get("names")
        if not isinstance(names, dict) or set(names) != set(LANGUAGES) or not all(
                isinstance(v, str) and v.strip() and len(v) <= 200 for v in names.values()):
            raise CalendarError(f"{at}.names: expected a name in each of {', '.join(LANGUAGES)}")
        reasons.append(Reason(code, parent, planned, {k: names[k].strip() for k in LANGUAGES}))
    return tuple(reasons)
