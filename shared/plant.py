"""The plant: several lines behind one gateway (PRODUCT.md, "Plant (several
lines)"). A plant file (``LINECTL_PLANT_FILE``, YAML) names each line's layout
and PLC; a line's id is its layout's ``line.id``. Without a plant file the plant
is the one line of ``LINECTL_LINE_FILE`` (:func:`single_line_plant`), and
everything behaves as before. The first line is the default line: the one the
unprefixed API paths and streams serve.

Nothing inside a line reads this: a line's services get their own layout and
PLC, as a one-line deployment does. Only what stands above the lines (``linectl
up``, the gateway) knows there are several."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from shared.config.parse import SettingsError
from shared.config.plc import parse_plc
from shared.layout import YAML_LOADER, Layout, LayoutError, load_layout
from shared.product_ideals import product_ideal_seconds
from shared.shift_calendar import CALENDAR_KEYS, Calendar, CalendarError, parse_calendar

LINE_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,31}$")
PLANT_KEYS = {"plant", "lines", "secrets", *CALENDAR_KEYS}
PLANT_HEADER_KEYS = {"id", "name"}
LINE_KEYS = {"layout", "plc", "simProtocol"}
SIM_PROTOCOLS = ("modbus", "opcua")


class PlantError(ValueError):
    """A plant file that cannot run: ``str(err)`` is one line naming the culprit."""


@dataclass(frozen=True)
class PlantLine:
    """One line of the plant: seed 004's system, with its own layout and PLC."""
    layout: Layout
    layout_file: Path
    plc: str = "sim"  # as LINECTL_PLC: sim | host:port | opc.tcp://…
    sim_protocol: str = "modbus"  # as LINECTL_SIM_PROTOCOL, for plc: sim

    @property
    def id(self) -> str:
        return self.layout.id

    @property
    def name(self) -> str:
        return self.layout.name


@dataclass(frozen=True)
class Plant:
    id: str
    name: str
    lines: tuple[PlantLine, ...]
    # The plant file's ``secrets:``: a file of line database URLs (services.stack.line_credentials).
    secrets_file: Path | None = None
    # Its time zone, shifts, breaks, holidays and downtime reasons (shared.shift_calendar).
    calendar: Calendar = field(default_factory=Calendar)

    @property
    def default_line(self) -> PlantLine:
        return self.lines[0]

    def line(self, line_id: str) -> PlantLine:
        """The line ``line_id``; KeyError for a line the plant does not have."""
        for line in self.lines:
            if line.id == line_id:
                return line
        raise KeyError(line_id)

    @property
    def line_ids(self) -> tuple[str, ...]:
        return tuple(line.id for line in self.lines)


def single_line_plant(line_file: Path, plc: str = "sim", sim_protocol: str = "modbus") -> Plant:
    """The plant of a one-line deployment: its line, named as its layout names it."""
    line = PlantLine(_layout(line_file, "LINECTL_LINE_FILE"), Path(line_file), plc, sim_protocol)
    return Plant(line.id, line.name, (line,))


def plant_of(settings) -> Plant:
    """The plant the settings name: ``LINECTL_PLANT_FILE``'s, else the one line
    of ``LINECTL_LINE_FILE`` (with ``LINECTL_PLC`` and ``LINECTL_SIM_PROTOCOL``)."""
    if settings.plant_file:
        return load_plant(settings.plant_file)
    return single_line_plant(settings.line_file, settings.plc, settings.sim_protocol)


def load_plant(path: str | Path) -> Plant:
    """Read and check a plant file; :class:`PlantError` names what is wrong."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(), Loader=YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise PlantError(f"{path}: {_one_line(exc)}") from None
    if not isinstance(data, dict):
        raise PlantError(f"{path}: expected a mapping with 'plant' and 'lines'")
    _no_unknown(data, PLANT_KEYS, str(path))
    header = data.get("plant") or {}
    if not isinstance(header, dict):
        raise PlantError(f"{path}: plant: expected a mapping with 'id' and 'name'")
    _no_unknown(header, PLANT_HEADER_KEYS, f"{path}: plant")
    entries = data.get("lines")
    if not isinstance(entries, list) or not entries:
        raise PlantError(f"{path}: lines: expected a list of at least one line")
    lines: list[PlantLine] = []
    for n, entry in enumerate(entries, 1):
        line = _plant_line(path, n, entry)
        if line.id in (known.id for known in lines):
            raise PlantError(f"{path}: lines[{n}]: line id {line.id!r} is already the id of another line")
        lines.append(line)
    plant_id = str(header.get("id") or lines[0].id)
    if not LINE_ID.match(plant_id):
        raise PlantError(f"{path}: plant.id: {plant_id!r} is not an id ({LINE_ID.pattern})")
    secrets = data.get("secrets")
    if secrets is not None and (not isinstance(secrets, str) or not secrets.strip()):
        raise PlantError(f"{path}: secrets: expected the path of a secrets file (relative to the plant file)")
    try:
        calendar = parse_calendar(data, str(path))
    except CalendarError as exc:
        raise PlantError(str(exc)) from None
    return Plant(plant_id, str(header.get("name") or plant_id), tuple(lines),
                 (path.parent / secrets).resolve() if secrets else None, calendar)


def _plant_line(path: Path, n: int, entry) -> PlantLine:
    where = f"{path}: lines[{n}]"
    if not isinstance(entry, dict) or "layout" not in entry:
        raise PlantError(f"{where}: expected a mapping with 'layout' (and 'plc', 'simProtocol')")
    _no_unknown(entry, LINE_KEYS, where)
    layout_file = (path.parent / str(entry["layout"])).resolve()
    layout = _layout(layout_file, where)
    try:
        plc = parse_plc(f"{where}.plc", str(entry.get("plc", "sim")))
    except SettingsError as exc:
        raise PlantError(_one_line(exc)) from None
    protocol = entry.get("simProtocol", "modbus")
    if protocol not in SIM_PROTOCOLS:
        raise PlantError(f"{where}.simProtocol: expected one of {', '.join(SIM_PROTOCOLS)}, got {protocol!r}")
    return PlantLine(layout, layout_file, plc, protocol)


def _layout(layout_file: Path, where: str) -> Layout:
    try:
        layout = load_layout(layout_file)
    except LayoutError as exc:
        raise PlantError(f"{where}: layout {layout_file}: {_one_line(exc)}") from None
    try:
        product_ideal_seconds(layout)
    except LayoutError as exc:
        raise PlantError(f"{where}: layout {layout_file}: {_one_line(exc)}") from None
    if not LINE_ID.match(layout.id):
        raise PlantError(f"{where}: layout {layout_file}: line.id {layout.id!r} is not a line id "
                         f"({LINE_ID.pattern})")
    return layout


def _no_unknown(mapping: dict, known: set[str], where: str) -> None:
    unknown = sorted(set(map(str, mapping)) - known)
    if unknown:
        raise PlantError(f"{where}: unknown key {unknown[0]!r} (expected {', '.join(sorted(known))})")


def _one_line(exc: Exception) -> str:
    return " ".join(str(exc).split())
