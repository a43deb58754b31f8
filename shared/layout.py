"""Loads and validates the line layout (``deploy/line.yaml``).

The layout is data: equipment, buffer size, tools and products with routes.
Every process reads the same file (``LINECTL_LINE_FILE``); a malformed layout
fails with :class:`LayoutError` naming the offending entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml

STEP_OPS = ("process", "inspect", "scan", "mark")
# libyaml's safe loader where PyYAML has it (ten times faster; the gateway reads a
# layout per app); the same documents, the same errors.
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LayoutError(ValueError):
    pass


@dataclass(frozen=True)
class EquipmentSpec:
    id: str
    name: str
    kind: str
    slots: int
    batch: bool
    cycle_seconds: float  # what the simulator plays
    # The time a cycle should take (OEE's performance: ideal × cycles ÷ run
    # time); a batch machine's cycle is one batch run.
    ideal_cycle_seconds: float = 0.0
    plc: dict[str, Any] = field(default_factory=dict)

    @property
    def inspection(self) -> bool:
        return self.kind == "inspection"


@dataclass(frozen=True)
class ToolSpec:
    id: str
    kind: str  # scanner | marker
    name: str


@dataclass(frozen=True)
class RouteStep:
    op: str  # process | inspect | scan | mark
    equipment_kind: str | None = None

    def to_json(self) -> dict:
        out: dict[str, Any] = {"op": self.op}
        if self.equipment_kind:
            out["equipmentKind"] = self.equipment_kind
        return out


@dataclass(frozen=True)
class ProductSpec:
    id: str
    name: str
    route: tuple[RouteStep, ...]


@dataclass(frozen=True)
class EquipmentRegisters:
    """Where one machine's register block is, and its robot station number."""

    equipment_id: str
    station: int
    base: int
    slots: int

    @property
    def size(self) -> int:
        return MACHINE_HEADER + MACHINE_SLOT_STRIDE * self.slots


@dataclass(frozen=True)
class PlcMap:
    """The ``plc:`` keys of the layout: base addresses of every register block.

    Offsets inside each block are fixed by deploy/REGISTER_MAP.md
    (``services.hardware.plc`` names them); only the bases are data."""

    unit_id: int
    robot_base: int
    dock_base: int
    buffer_base: int
    sim_control_base: int
    dock_station: int
    buffer_station: int
    equipment: tuple[EquipmentRegisters, ...]
    identity: str | None = None  # plc.identity: what the PLC must publish (None: logged, not checked)
    identity_base: int = 0  # plc.identityBlock.base: where it publishes it (Modbus)

    def for_equipment(self, equipment_id: str) -> EquipmentRegisters:
        for e in self.equipment:
            if e.equipment_id == equipment_id:
                return e
        raise KeyError(equipment_id)

    def by_station(self, station: int) -> EquipmentRegisters | None:
        return next((e for e in self.equipment if e.station == station), None)


# Block sizes (registers); the offsets inside are in services/hardware/plc.py.
IDENTITY_BLOCK = 20
IDENTITY_MAX = 32  # characters of plc.identity (16 registers, two ASCII characters each)
ROBOT_BLOCK = 48
DOCK_BLOCK = 4
SIM_CONTROL_BLOCK = 16
MACHINE_HEADER = 8
MACHINE_SLOT_STRIDE = 8


@dataclass(frozen=True)
class Layout:
    id: str
    name: str
    buffer_slots: int
    equipment: tuple[EquipmentSpec, ...]
    tools: tuple[ToolSpec, ...]
    products: tuple[ProductSpec, ...]
    raw: dict = field(default_factory=dict, compare=False, repr=False)
    plc: PlcMap | None = None
    # ``opcua:`` — per device (Robot, Dock, Buffer, an equipment id), signal or method
    # name → NodeId string replacing the default of deploy/OPCUA_MAP.md.
    opcua_nodes: dict[str, dict[str, str]] = field(default_factory=dict, compare=False)

    def equipment_by_id(self, equipment_id: str) -> EquipmentSpec:
        for e in self.equipment:
            if e.id == equipment_id:
                return e
        raise KeyError(equipment_id)

    def product(self, product_id: str) -> ProductSpec:
        for p in self.products:
            if p.id == product_id:
                return p
        raise KeyError(product_id)

    def to_json(self) -> dict:
        """``GET /api/line``."""
        line = self.raw.get("line", {})
        return {
            "id": self.id,
            "name": self.name,
            "bufferSlots": self.buffer_slots,
            "dock": line.get("dock", {"id": "DOCK", "name": "Docking station"}),
            "robot": self.raw.get("robot", {"id": "R1", "name": "Robot"}),
            "tools": [{"id": t.id, "kind": t.kind, "name": t.name} for t in self.tools],
            "equipment": [
                {"id": e.id, "name": e.name, "kind": e.kind, "slots": e.slots,
                 "batch": e.batch, "cycleSeconds": e.cycle_seconds,
                 "idealCycleSeconds": e.ideal_cycle_seconds}
                for e in self.equipment
            ],
        }

    def products_json(self) -> list[dict]:
        """``GET /api/products``."""
        return [
            {"id": p.id, "name": p.name, "route": [s.to_json() for s in p.route]}
            for p in self.products
        ]


def _require(mapping: dict, key: str, where: str):
    if not isinstance(mapping, dict) or key not in mapping:
        raise LayoutError(f"{where}: missing {key!r}")
    return mapping[key]


def _seconds(mapping: dict, key: str, default, where: str) -> float:
    value = mapping.get(key, default)
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise LayoutError(f"{where}: {key} must be a number of seconds") from None
    if not 0 < seconds <= 86400:
        raise LayoutError(f"{where}: {key} must be more than 0 and at most 86400")
    return seconds


def _parse_equipment(data: dict) -> list[EquipmentSpec]:
    equipment = []
    seen = set()
    for i, e in enumerate(_require(data, "equipment", "layout")):
        where = f"equipment[{i}]"
        eid = str(_require(e, "id", where))
        if eid in seen:
            raise LayoutError(f"{where}: duplicate id {eid!r}")
        seen.add(eid)
        slots = int(e.get("slots", 1))
        if not 1 <= slots <= 32:
            raise LayoutError(f"{where} ({eid}): slots must be 1..32")
        equipment.append(
            EquipmentSpec(
                id=eid,
                name=str(e.get("name", eid)),
                kind=str(_require(e, "kind", where)),
                slots=slots,
                batch=bool(e.get("batch", False)),
                cycle_seconds=_seconds(e, "cycleSeconds", 10, where),
                ideal_cycle_seconds=_seconds(e, "idealCycleSeconds", e.get("cycleSeconds", 10), where),
                plc=dict(e.get("plc") or {}),
            )
        )
    return equipment


def _parse_route_step(s: dict, where: str, kinds: set[str], tool_kinds: set[str]) -> RouteStep:
    """One step of a product's route; the equipment or tool it needs must exist."""
    op = str(_require(s, "op", where))
    if op not in STEP_OPS:
        raise LayoutError(f"{where}: unknown op {op!r}")
    kind = s.get("equipmentKind")
    if op in ("process", "inspect"):
        if kind not in kinds:
            raise LayoutError(f"{where}: no equipment of kind {kind!r}")
    elif op == "scan" and "scanner" not in tool_kinds:
        raise LayoutError(f"{where}: scan needs a scanner tool")
    elif op == "mark" and "marker" not in tool_kinds:
        raise LayoutError(f"{where}: mark needs a marker tool")
    return RouteStep(op=op, equipment_kind=kind)


def _parse_products(data: dict, kinds: set[str], tool_kinds: set[str]) -> list[ProductSpec]:
    products = []
    for i, p in enumerate(_require(data, "products", "layout")):
        where = f"products[{i}]"
        pid = str(_require(p, "id", where))
        steps = [_parse_route_step(s, f"{where}.route[{j}]", kinds, tool_kinds)
                 for j, s in enumerate(_require(p, "route", where))]
        if not steps:
            raise LayoutError(f"{where}: empty route")
        products.append(ProductSpec(id=pid, name=str(p.get("name", pid)), route=tuple(steps)))
    return products


def parse_layout(data: dict) -> Layout:
    if not isinstance(data, dict):
        raise LayoutError("layout: not a mapping")
    line = _require(data, "line", "layout")
    buffer_slots = int(line.get("bufferSlots", 8))
    if not 1 <= buffer_slots <= 64:
        raise LayoutError("line.bufferSlots: must be 1..64")
    equipment = _parse_equipment(data)
    tools = tuple(
        ToolSpec(id=str(t["id"]), kind=str(t.get("kind", t["id"])).lower(), name=str(t.get("name", t["id"])))
        for t in data.get("tools", [])
    )
    products = _parse_products(data, {e.kind for e in equipment}, {t.kind for t in tools})
    plc = _parse_plc(data["plc"], buffer_slots, equipment) if "plc" in data else None
    opcua_nodes = parse_opcua_nodes(data["opcua"], equipment) if data.get("opcua") is not None else {}

    return Layout(
        plc=plc,
        opcua_nodes=opcua_nodes,
        id=str(line.get("id", "line")),
        name=str(line.get("name", "Line")),
        buffer_slots=buffer_slots,
        equipment=tuple(equipment),
        tools=tools,
        products=tuple(products),
        raw=data,
    )


def _address(mapping: dict, key: str, where: str) -> int:
    value = _require(mapping, key, where)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise LayoutError(f"{where}.{key}: expected a register address 0..65535, got {value!r}")
    return value


def _parse_plc(data: dict, buffer_slots: int, equipment: list[EquipmentSpec]) -> PlcMap:
    if not isinstance(data, dict):
        raise LayoutError("plc: not a mapping")
    unit_id = data.get("unitId", 1)
    if isinstance(unit_id, bool) or not isinstance(unit_id, int) or not 0 <= unit_id <= 255:
        raise LayoutError(f"plc.unitId: expected 0..255, got {unit_id!r}")
    robot = _require(data, "robot", "plc")
    dock = _require(data, "dock", "plc")
    buffer = _require(data, "buffer", "plc")
    control = data.get("simControl") or {}
    blocks = [
        ("plc.robot", _address(robot, "base", "plc.robot"), ROBOT_BLOCK),
        ("plc.dock", _address(dock, "base", "plc.dock"), DOCK_BLOCK),
        ("plc.buffer", _address(buffer, "base", "plc.buffer"), buffer_slots),
    ]
    sim_control_base = _address(control, "base", "plc.simControl") if control else 0
    if control:
        blocks.append(("plc.simControl", sim_control_base, SIM_CONTROL_BLOCK))
    identity, identity_base = _identity(data)  # the block is read at every connect, set or not
    blocks.append(("plc.identityBlock", identity_base, IDENTITY_BLOCK))
    dock_station = _address(dock, "station", "plc.dock")
    buffer_station = _address(buffer, "station", "plc.buffer")
    stations = {dock_station: "plc.dock", buffer_station: "plc.buffer"}
    if len(stations) != 2:
        raise LayoutError("plc: dock and buffer share a station number")
    regs = []
    for e in equipment:
        where = f"equipment {e.id}: plc"
        if not e.plc:
            raise LayoutError(f"{where}: missing (station and base are required with a plc map)")
        station = _address(e.plc, "station", where)
        if station in stations:
            raise LayoutError(f"{where}.station {station} is already used by {stations[station]}")
        stations[station] = where
        r = EquipmentRegisters(e.id, station, _address(e.plc, "base", where), e.slots)
        blocks.append((where, r.base, r.size))
        regs.append(r)
    blocks.sort(key=lambda b: b[1])
    for (name_a, base_a, size_a), (name_b, base_b, _size_b) in pairwise(blocks):
        if base_a + size_a > base_b:
            hint = " (at 0 unless plc.identityBlock.base moves it)" if "plc.identityBlock" in (name_a, name_b) else ""
            raise LayoutError(f"{name_b}: register block at {base_b} overlaps {name_a}"
                              f" ({base_a}..{base_a + size_a - 1}){hint}")
    if blocks[-1][1] + blocks[-1][2] > 65536:
        raise LayoutError(f"{blocks[-1][0]}: register block runs past address 65535")
    return PlcMap(
        unit_id=unit_id,
        robot_base=_address(robot, "base", "plc.robot"),
        dock_base=_address(dock, "base", "plc.dock"),
        buffer_base=_address(buffer, "base", "plc.buffer"),
        sim_control_base=sim_control_base,
        dock_station=dock_station,
        buffer_station=buffer_station,
        equipment=tuple(regs),
        identity=identity, identity_base=identity_base,
    )


def _identity(data: dict) -> tuple[str | None, int]:
    """``plc.identity`` (1..32 printable ASCII characters, or None) and the identity block's base (0 unless
    ``plc.identityBlock.base``) of deploy/REGISTER_MAP.md; OPC UA publishes the identity as ``Cell/Identity``."""
    value, block = data.get("identity"), data.get("identityBlock") or {}
    if not isinstance(block, dict):
        raise LayoutError("plc.identityBlock: expected a mapping with a base address")
    if value is not None and (not isinstance(value, str) or not value):
        raise LayoutError(f"plc.identity: expected a string of 1..{IDENTITY_MAX} characters, got {value!r}")
    if value is not None and len(value) > IDENTITY_MAX:
        raise LayoutError(f"plc.identity: at most {IDENTITY_MAX} characters, got {len(value)} ({value!r})")
    if value is not None and (not all(" " <= c <= "~" for c in value) or value != value.strip()):
        raise LayoutError(f"plc.identity: printable ASCII without leading or trailing spaces, got {value!r}")
    return value, _address(block, "base", "plc.identityBlock") if block else 0


# An OPC UA NodeId in its string form (OPC 10000-6 5.3.1.10): ns=<index> or
# nsu=<namespace URI>, then i=<number>, s=<string>, g=<guid> or b=<base64>.
_NODE_ID = re.compile(
    r"^(?:(?:ns=\d{1,5}|nsu=[^;]+);)?"
    r"(?:i=\d{1,10}|s=.+|g=[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
    r"|b=[A-Za-z0-9+/=]+)$")
_OPCUA_NAME = re.compile(r"^(?:\.|[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z][A-Za-z0-9]*)*)$")


def parse_opcua_nodes(data, equipment: list[EquipmentSpec]) -> dict[str, dict[str, str]]:
    """The layout's ``opcua:`` NodeIds: ``{device: {name: nodeId}}`` with device
    ``Cell``, ``Robot``, ``Dock``, ``Buffer`` or an equipment id, name a signal or method
    of deploy/OPCUA_MAP.md (``Slot2.Done``, ``Execute``; ``.`` the device object
    itself). Names are checked against the node map when the hardware service
    starts (services/hardware/opcua_map.py); here their form and the NodeIds."""
    if not isinstance(data, dict):
        raise LayoutError("opcua: expected a mapping of device → {name: NodeId}")
    devices = {"Cell", "Robot", "Dock", "Buffer", *(e.id for e in equipment)}
    out: dict[str, dict[str, str]] = {}
    for device, names in data.items():
        where = f"opcua.{device}"
        if device not in devices:
            raise LayoutError(f"{where}: unknown device (expected one of {', '.join(sorted(devices))})")
        if not isinstance(names, dict):
            raise LayoutError(f"{where}: expected a mapping of name → NodeId")
        for name, node_id in names.items():
            if not isinstance(name, str) or not _OPCUA_NAME.match(name):
                raise LayoutError(f"{where}: {name!r} is not a signal or method name (e.g. AckId, Slot1.Done)")
            if not isinstance(node_id, str) or not _NODE_ID.match(node_id.strip()):
                raise LayoutError(f"{where}.{name}: expected a NodeId such as 'ns=3;s=DB10.AckId' or "
                                  f"'nsu=urn:plc;i=1001', got {node_id!r}")
            out.setdefault(device, {})[name] = node_id.strip()
    return out


def load_layout(path: str | Path) -> Layout:
    try:
        data = yaml.load(Path(path).read_text(), Loader=YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise LayoutError(f"{path}: {exc}") from None
    return parse_layout(data)
