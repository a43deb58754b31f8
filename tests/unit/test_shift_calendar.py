"""The plant's calendar (PRODUCT.md, "Shifts, downtime and OEE"): shift instances
in the plant's zone (across midnight, over both daylight-saving changes of
Europe/Berlin), breaks, holidays, the reason tree, and every way the calendar
keys of a plant file can be wrong, each stopping with one line naming it."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from shared.plant import PlantError, load_plant
from shared.shift_calendar import Calendar, parse_calendar

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BERLIN = {
    "timezone": "Europe/Berlin",
    "shifts": [{"name": "early", "start": "06:00", "end": "14:00", "days": ["mon", "tue", "wed", "thu", "fri"]},
               {"name": "night", "start": "22:00", "end": "06:00", "days": ["fri", "sat", "sun"]}],
    "breaks": [{"shift": "early", "start": "10:00", "minutes": 30},
               {"shift": "night", "start": "02:00", "minutes": 20}],
    "holidays": ["2025-05-01"],
}


def utc(*args) -> datetime:
    return datetime(*args, tzinfo=UTC)


def test_a_night_shift_crosses_midnight_and_its_break_is_on_the_second_day():
    cal = parse_calendar(BERLIN, "plant.yaml")
    (night,) = [i for i in cal.instances(utc(2025, 6, 6, 12), utc(2025, 6, 7, 12)) if i.name == "night"]
    assert night.day.isoformat() == "2025-06-06"  # a Friday, CEST (UTC+2)
    assert (night.start, night.end) == (utc(2025, 6, 6, 20), utc(2025, 6, 7, 4))
    assert night.breaks == ((utc(2025, 6, 7, 0), utc(2025, 6, 7, 0, 20)),)


@pytest.mark.parametrize(("night_of", "hours", "start", "end"), [
    # Spring: on 30 March 2025 at 02:00 the clocks go to 03:00: the night is 7 hours.
    ("2025-03-29", 7, utc(2025, 3, 29, 21), utc(2025, 3, 30, 4)),
    # Autumn: on 26 October 2025 at 03:00 the clocks go back to 02:00: 9 hours.
    ("2025-10-25", 9, utc(2025, 10, 25, 20), utc(2025, 10, 26, 5)),
])
def test_a_night_on_a_daylight_saving_change_is_7_or_9_hours(night_of, hours, start, end):
    cal = parse_calendar(BERLIN, "plant.yaml")
    nights = [i for i in cal.instances(start - timedelta(hours=1), end) if i.day.isoformat() == night_of]
    (night,) = nights
    assert (night.start, night.end) == (start, end)
    assert night.seconds == hours * 3600
    # The break at 02:00 on the clock: on the spring night 02:00 does not exist (read as 02:00 CET).
    assert night.breaks[0][1] - night.breaks[0][0] == timedelta(minutes=20)


def test_weekdays_and_holidays_choose_the_days():
    cal = parse_calendar(BERLIN, "plant.yaml")
    # Thursday 1 May 2025 is a holiday: no early shift; Friday 2 May has one.
    found = [(i.name, i.day.isoformat()) for i in cal.instances(utc(2025, 5, 1), utc(2025, 5, 3))]
    assert ("early", "2025-05-01") not in found and ("early", "2025-05-02") in found
    early = next(i for i in cal.instances(utc(2025, 5, 2), utc(2025, 5, 3)) if i.name == "early")
    assert (early.start, early.end) == (utc(2025, 5, 2, 4), utc(2025, 5, 2, 12))
    assert early.breaks == ((utc(2025, 5, 2, 8), utc(2025, 5, 2, 8, 30)),)


def test_without_a_calendar_one_shift_runs_all_day_in_utc():
    cal = Calendar()
    items = cal.instances(utc(2025, 3, 29, 12), utc(2025, 3, 31, 1))
    assert [(i.name, i.start, i.end) for i in items] == [
        ("day", utc(2025, 3, 29), utc(2025, 3, 30)), ("day", utc(2025, 3, 30), utc(2025, 3, 31)),
        ("day", utc(2025, 3, 31), utc(2025, 4, 1))]


def test_unquoted_yaml_times_read_as_clock_times(tmp_path):
    shutil.copy(DEPLOY / "lines" / "cell-a.yaml", tmp_path / "cell-a.yaml")
    (tmp_path / "plant.yaml").write_text(
        "lines: [{layout: cell-a.yaml}]\ntimezone: Asia/Shanghai\n"
        "shifts: [{name: A, start: 08:00, end: 20:00, days: [mon]}]\n"
        "downtimeReasons:\n  - {code: MECH, names: {zh-CN: 机械, en: Mechanical}}\n"
        "  - {code: MECH_SPINDLE, parent: MECH, names: {zh-CN: 主轴, en: Spindle}}\n")
    plant = load_plant(tmp_path / "plant.yaml")
    (shift,) = plant.calendar.instances(utc(2025, 6, 2), utc(2025, 6, 3))
    assert (shift.start, shift.end) == (utc(2025, 6, 2, 0), utc(2025, 6, 2, 12))
    assert plant.calendar.reason("MECH_SPINDLE").parent == "MECH"


@pytest.mark.parametrize(("text", "named"), [
    ("timezone: Mars/Olympus\n", "timezone: 'Mars/Olympus' is not an IANA"),
    ("shifts: [{name: A, start: '25:00', end: '06:00'}]\n", "shifts[1].start"),
    ("shifts: [{name: A, start: '06:00', end: '14:00', days: [mon, funday]}]\n", "shifts[1].days"),
    ("shifts: [{name: A, start: '06:00', end: '14:00', colour: red}]\n", "shifts[1]: unknown key 'colour'"),
    ("shifts: [{name: A, start: '06:00', end: '14:00'}, {name: A, start: '14:00', end: '22:00'}]\n",
     "shifts[2].name"),
    ("shifts: [{name: A, start: '06:00', end: '14:00'}]\nbreaks: [{shift: B, start: '10:00', minutes: 5}]\n",
     "breaks[1].shift"),
    ("shifts: [{name: A, start: '06:00', end: '14:00'}]\nbreaks: [{shift: A, start: '13:50', minutes: 30}]\n",
     "breaks[1]: the break"),
    ("holidays: ['2025-13-01']\n", "holidays[1]"),
    ("downtimeReasons: [{code: X, parent: Y, names: {zh-CN: 甲, en: X}}]\n", "downtimeReasons[1].parent"),
    ("downtimeReasons: [{code: X, names: {en: X}}]\n", "downtimeReasons[1].names"),
    ("downtimeReasons: [{code: x, names: {zh-CN: 甲, en: X}}]\n", "downtimeReasons[1].code"),
])
def test_a_wrong_calendar_stops_with_one_line_naming_it(tmp_path, text, named):
    shutil.copy(DEPLOY / "lines" / "cell-a.yaml", tmp_path / "cell-a.yaml")
    (tmp_path / "plant.yaml").write_text("lines: [{layout: cell-a.yaml}]\n" + text)
    with pytest.raises(PlantError) as caught:
        load_plant(tmp_path / "plant.yaml")
    message = str(caught.value)
    assert named in message and "\n" not in message


def test_the_figures_of_a_9_hour_night_over_the_autumn_change():
    """The figures of the night of 25-26 October 2025 in Berlin (9 hours): by hand,
    shift 32 400 s, its 20-minute break planned: PBT 31 200 s; one stop of 10 min:
    APT 30 600 s; 500 pieces of 60 s ideal, 490 good."""
    from shared.oee import Stretch, figures, periods

    cal = parse_calendar(BERLIN, "plant.yaml")
    (night,) = [p for p in periods(cal, utc(2025, 10, 25, 20), utc(2025, 10, 26, 5), "shift") if p.shift == "night"]
    stop = Stretch(1, "DOWN", "ESTOP", None, utc(2025, 10, 25, 23), utc(2025, 10, 25, 23, 10), False,
                   None, None, None, None, None)
    item = figures(night, [stop], [], {"SHAFT-B": [490, 10]}, {"SHAFT-B": 60.0}, 30.0)
    assert (item["shiftSeconds"], item["plannedDowntimeSeconds"], item["downSeconds"]) == (32400, 1200, 600)
    assert (item["plannedBusySeconds"], item["actualProductionSeconds"]) == (31200, 30600)
    assert item["availability"] == pytest.approx(30600 / 31200, abs=1e-6)
    assert item["performance"] == pytest.approx(500 * 60 / 30600, abs=1e-6)
    assert item["oee"] == pytest.approx(30600 / 31200 * 30000 / 30600 * 0.98, abs=1e-6)
