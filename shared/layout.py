"""Loads and validates the line layout (``deploy/line.yaml``).

The layout is data: equipment, buffer size, tools and products with routes.
Every process reads the same file (``LINECTL_LINE_FILE``); a malformed layout
fails with :class:`LayoutError` naming the offending entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STEP_OPS = ("process", "inspect", "scan", "mark")


class LayoutError(ValueError):
    pass


@dataclass(frozen=True)
class EquipmentSpec:
    id: str
    name: str
    kind: str
    slots: int
    batch: bool
    cycle_seconds: float
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
class Layout:
    id: str
    name: str
    buffer_slots: int
    equipment: tuple[EquipmentSpec, ...]
    tools: tuple[ToolSpec, ...]
    products: tuple[ProductSpec, ...]
    raw: dict = field(default_factory=dict, compare=False, repr=False)

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
                 "batch": e.batch, "cycleSeconds": e.cycle_seconds}
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


def parse_layout(data: dict) -> Layout:
    if not isinstance(data, dict):
        raise LayoutError("layout: not a mapping")
    line = _require(data, "line", "layout")
    buffer_slots = int(line.get("bufferSlots", 8))
    if not 1 <= buffer_slots <= 64:
        raise LayoutError("line.bufferSlots: must be 1..64")

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
                cycle_seconds=float(e.get("cycleSeconds", 10)),
                plc=dict(e.get("plc") or {}),
            )
        )

    tools = tuple(
        ToolSpec(id=str(t["id"]), kind=str(t.get("kind", t["id"])).lower(), name=str(t.get("name", t["id"])))
        for t in data.get("tools", [])
    )
    tool_kinds = {t.kind for t in tools}
    kinds = {e.kind for e in equipment}

    products = []
    for i, p in enumerate(_require(data, "products", "layout")):
        where = f"products[{i}]"
        pid = str(_require(p, "id", where))
        steps = []
        for j, s in enumerate(_require(p, "route", where)):
            op = str(_require(s, "op", f"{where}.route[{j}]"))
            if op not in STEP_OPS:
                raise LayoutError(f"{where}.route[{j}]: unknown op {op!r}")
            kind = s.get("equipmentKind")
            if op in ("process", "inspect"):
                if kind not in kinds:
                    raise LayoutError(f"{where}.route[{j}]: no equipment of kind {kind!r}")
            elif op == "scan" and "scanner" not in tool_kinds:
                raise LayoutError(f"{where}.route[{j}]: scan needs a scanner tool")
            elif op == "mark" and "marker" not in tool_kinds:
                raise LayoutError(f"{where}.route[{j}]: mark needs a marker tool")
            steps.append(RouteStep(op=op, equipment_kind=kind))
        if not steps:
            raise LayoutError(f"{where}: empty route")
        products.append(ProductSpec(id=pid, name=str(p.get("name", pid)), route=tuple(steps)))

    return Layout(
        id=str(line.get("id", "line")),
        name=str(line.get("name", "Line")),
        buffer_slots=buffer_slots,
        equipment=tuple(equipment),
        tools=tools,
        products=tuple(products),
        raw=data,
    )


def load_layout(path: str | Path) -> Layout:
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise LayoutError(f"{path}: {exc}") from None
    return parse_layout(data)
