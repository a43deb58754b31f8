"""What a line publishes: its metrics, read whole at a birth and changed by each
loop transaction's events (docs/uns.md lists them with their types).

A line is an edge node; its devices are its equipment, plus ``ROBOT``,
``BUFFER`` and ``DOCK``. Two kinds of metric:

* **from the event**: a value an event's payload states (a machine's state, a
  slot, the dock's count, the PLC link, the robot's task). A historical event
  (the backlog after an interruption) gives these, as of its time;
* **counted**: what needs the line's current totals (completed and scrapped
  pieces, open orders, alarms, manual actions, a machine's cycles). They are
  kept from the birth's snapshot on, so only live transactions carry them.

Nothing here speaks MQTT: ``services.uns.port``'s formats turn changes into
messages."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import text

from shared.db.models import ALARM_ACTIVE, JOB_TERMINAL, WORK_ORDER_TERMINAL
from shared.piece_query import last_finished

NODE = ""  # the edge node's own metrics (no device)
ROBOT, BUFFER, DOCK = "ROBOT", "BUFFER", "DOCK"
ROBOT_TASKS = ("DOCK_TO_BUFFER", "BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP", "BUFFER_TO_DOCK")

# Sparkplug B data types (the schema's DataType enum), by the names docs/uns.md uses.
INT64, UINT64, DOUBLE, BOOLEAN, STRING = 4, 8, 10, 11, 12

EVENT_SEQ = "Line/EventSeq"
PLC_CONNECTED = "Line/PLC Connected"
CONTROLLER = "Line/Controller"
STATE, FAULT_CODE = "State", "Fault Code"
DOWN = "DOWN"  # a machine's State while its line's controller is down: nothing tracks it then
EQUIPMENT_FAULT = "EQUIPMENT_FAULT"  # the alarm a machine's PLC fault raises (facts.fault: its code)
LAST_PIECE = "Line/LastPiece"  # a finished piece's summary (JSON): once per piece finished, in its transaction
REBIRTH = "Node Control/Rebirth"
BD_SEQ = "bdSeq"
NODE_METRICS = (
    (BD_SEQ, INT64), (REBIRTH, BOOLEAN), (EVENT_SEQ, UINT64), (PLC_CONNECTED, BOOLEAN),
    ("Line/Active Orders", INT64), ("Line/Completed", INT64), ("Line/Scrapped", INT64),
    ("Line/Open Alarms", INT64), ("Line/Open Manual Actions", INT64), (CONTROLLER, BOOLEAN),
    (LAST_PIECE, STRING),
    ("Line/Shift", STRING), ("Line/OEE", DOUBLE), ("Line/OEE/Availability", DOUBLE),
    ("Line/OEE/Performance", DOUBLE), ("Line/OEE/Quality", DOUBLE),
)
# The current shift's OEE (shared.oee, ISO 22400-2): each figure's metric.
SHIFT_FIGURES = {"oee": "Line/OEE", "availability": "Line/OEE/Availability",
                 "performance": "Line/OEE/Performance", "quality": "Line/OEE/Quality"}
FINISHED = ("COMPLETED", "SCRAPPED")  # a piece's end: its record's summary is published


@dataclass(frozen=True)
class Change:
    """One metric's new value (None: null) at ``at`` (epoch milliseconds)."""
    device: str
    name: str
    value: object
    at: int


def millis(at: str | datetime | None) -> int:
    if at is None:
        return 0
    moment = at if isinstance(at, datetime) else datetime.fromisoformat(str(at).replace("Z", "+00:00"))
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class Catalog:
    """Every metric of a line, with its Sparkplug alias and type: fixed by the
    layout, so an alias means the same metric across births and restarts."""
    devices: tuple[str, ...]
    types: dict[tuple[str, str], int]
    aliases: dict[tuple[str, str], int]

    @classmethod
    def of_layout(cls, layout) -> Catalog:
        metrics: list[tuple[str, str, int]] = [(NODE, name, kind) for name, kind in NODE_METRICS]
        devices = []
        for spec in layout.equipment:
            devices.append(spec.id)
            metrics += [(spec.id, STATE, STRING), (spec.id, FAULT_CODE, INT64), (spec.id, "Cycle Count", INT64)]
            for n in range(1, spec.slots + 1):
                metrics += [(spec.id, f"Slot/{n}/Status", STRING), (spec.id, f"Slot/{n}/Job Id", INT64)]
        devices += [ROBOT, BUFFER, DOCK]
        metrics += [(ROBOT, "Task/Id", INT64), (ROBOT, "Task/Kind", STRING)]
        metrics += [(BUFFER, f"Slot/{n}/Job Id", INT64) for n in range(1, layout.buffer_slots + 1)]
        metrics += [(DOCK, "Pieces Waiting", INT64)]
        types = {(d, n): k for d, n, k in metrics}
        aliases = {(d, n): i for i, (d, n, _k) in enumerate(metrics, start=1)}
        return cls(tuple(devices), types, aliases)

    def of_device(self, device: str) -> list[str]:
        return [n for (d, n) in self.types if d == device]


_SNAPSHOT_SQL = {
    "seq": "SELECT coalesce(max(seq), 0) FROM event_log",
    "at": "SELECT now()",
    "states": "SELECT DISTINCT ON (equipment_id) equipment_id, state FROM machine_state_interval"
              " WHERE ended_at IS NULL ORDER BY equipment_id, started_at DESC",
    "cycles": "SELECT equipment_id, count(*) FROM machine_cycle WHERE NOT aborted AND ended_at IS NOT NULL"
              " GROUP BY equipment_id",
    "slots": "SELECT equipment_id, slot_no, status, current_job_id FROM equipment_slot",
    "buffer": "SELECT id, temp_slot_no FROM job WHERE temp_slot_no IS NOT NULL AND status <> ALL(:terminal)",
    "dock": "SELECT pieces_waiting FROM dock ORDER BY id LIMIT 1",
    "task": "SELECT id, kind FROM task WHERE status = 'RUNNING' AND kind = ANY(:robot) ORDER BY started_at DESC"
            " NULLS LAST LIMIT 1",
    "orders": "SELECT id FROM work_order WHERE status <> ALL(:order_terminal)",
    "output": "SELECT count(*) FILTER (WHERE status = 'COMPLETED'), count(*) FILTER (WHERE status = 'SCRAPPED')"
              " FROM job",
    "alarms": "SELECT id FROM alarm WHERE status = ANY(:active)",
    "actions": "SELECT id FROM manual_action WHERE status = 'OPEN'",
    "plc": "SELECT payload FROM event_log WHERE type = 'PlcConnection' ORDER BY seq DESC LIMIT 1",
    "faults": "SELECT DISTINCT ON (equipment_id) equipment_id, facts->>'fault' FROM alarm"
              " WHERE code = 'EQUIPMENT_FAULT' AND status <> 'CLEARED' AND equipment_id IS NOT NULL"
              " ORDER BY equipment_id, id DESC",
}
_PARAMS = {"terminal": list(JOB_TERMINAL), "robot": list(ROBOT_TASKS), "order_terminal": list(WORK_ORDER_TERMINAL),
           "active": list(ALARM_ACTIVE)}


@dataclass
class LineModel:
    """A line's current values, from a snapshot on: what a birth publishes, and
    what a live transaction changes. Read in one REPEATABLE READ transaction, so
    the values are exactly those of the log up to ``seq``."""
    catalog: Catalog
    seq: int = 0
    at: int = 0
    values: dict[tuple[str, str], object] = field(default_factory=dict)
    orders: set[int] = field(default_factory=set)
    alarms: set[int] = field(default_factory=set)
    actions: set[int] = field(default_factory=set)
    buffer_of_job: dict[int, int] = field(default_factory=dict)
    tracked: dict[str, object] = field(default_factory=dict)  # machine -> its tracked state (State shows DOWN)

    @classmethod
    def read(cls, conn, catalog: Catalog) -> LineModel:
        q = {name: conn.execute(text(sql), {k: v for k, v in _PARAMS.items() if f":{k}" in sql}).all()
             for name, sql in _SNAPSHOT_SQL.items()}
        model = cls(catalog, seq=int(q["seq"][0][0]), at=millis(q["at"][0][0]))
        v = {key: None for key in catalog.types}
        plc = q["plc"][0][0] if q["plc"] else {}
        completed, scrapped = q["output"][0]
        v.update({(NODE, BD_SEQ): 0, (NODE, REBIRTH): False, (NODE, EVENT_SEQ): model.seq,
                  (NODE, PLC_CONNECTED): bool(plc.get("connected", True)),
                  (NODE, "Line/Completed"): int(completed), (NODE, "Line/Scrapped"): int(scrapped)})
        for equipment_id, state in q["states"]:
            v[(equipment_id, STATE)] = state
        for equipment_id, code in q["faults"]:
            v[(equipment_id, FAULT_CODE)] = _int_or_none(code)
        for spec_id in catalog.devices:
            if (spec_id, "Cycle Count") in v:
                v[(spec_id, "Cycle Count")] = 0
        for equipment_id, n in q["cycles"]:
            v[(equipment_id, "Cycle Count")] = int(n)
        for equipment_id, slot_no, status, job_id in q["slots"]:
            v[(equipment_id, f"Slot/{slot_no}/Status")] = status
            v[(equipment_id, f"Slot/{slot_no}/Job Id")] = job_id
        for job_id, slot_no in q["buffer"]:
            model.buffer_of_job[job_id] = slot_no
            v[(BUFFER, f"Slot/{slot_no}/Job Id")] = job_id
        if q["dock"]:
            v[(DOCK, "Pieces Waiting")] = q["dock"][0][0]
        if q["task"]:
            v[(ROBOT, "Task/Id")], v[(ROBOT, "Task/Kind")] = q["task"][0]
        model.orders = {r[0] for r in q["orders"]}
        model.alarms = {r[0] for r in q["alarms"]}
        model.actions = {r[0] for r in q["actions"]}
        v[(NODE, CONTROLLER)] = True
        v[(NODE, LAST_PIECE)] = last_finished(conn)
        model.values = {key: value for key, value in v.items() if key in catalog.types}
        model.tracked = {d: model.values[(d, STATE)] for d in catalog.devices if (d, STATE) in catalog.types}
        model._counts()
        return model

    def set_controller(self, up: bool, at: int) -> list[Change]:
        """The line's controller came or went: ``Line/Controller``, and each machine's
        State (``DOWN`` while it is down; its tracked state again when it is back)."""
        before = dict(self.values)
        self.values[(NODE, CONTROLLER)] = up
        for device, state in self.tracked.items():
            self.values[(device, STATE)] = state if up else DOWN
        return [Change(d, n, value, at) for (d, n), value in self.values.items() if before.get((d, n)) != value]

    def set_shift(self, shift: str | None, figures: dict | None, at: int) -> list[Change]:
        """The current shift (None: outside every shift) and its OEE figures so far."""
        before = dict(self.values)
        self.values[(NODE, "Line/Shift")] = shift
        for key, name in SHIFT_FIGURES.items():
            self.values[(NODE, name)] = (figures or {}).get(key)
        return [Change(d, n, value, at) for (d, n), value in self.values.items() if before.get((d, n)) != value]

    def _counts(self) -> None:
        self.values[(NODE, "Line/Active Orders")] = len(self.orders)
        self.values[(NODE, "Line/Open Alarms")] = len(self.alarms)
        self.values[(NODE, "Line/Open Manual Actions")] = len(self.actions)

    @property
    def plc_connected(self) -> bool:
        return bool(self.values.get((NODE, PLC_CONNECTED), True))

    def apply(self, frames: list[dict], cycles=None) -> list[Change]:
        """A live transaction's frames (one tx, in seq order): what changed, each
        metric once at most, its last value. ``cycles(equipment ids)`` reads the
        machines' cycle counts (a machine whose state changed)."""
        before = dict(self.values)
        changed_machines = set()
        for frame in frames:
            for change in event_changes(frame, self.catalog):
                if change.device == ROBOT and change.value is None and \
                        self.values.get((ROBOT, "Task/Id")) != frame["payload"].get("id"):
                    continue  # another task ended: the robot's current one goes on
                if change.name == STATE and change.device in self.tracked:
                    self.tracked[change.device] = change.value
                    if self.values.get((NODE, CONTROLLER)) is False:
                        continue  # DOWN until the controller is seen again
                self.values[(change.device, change.name)] = change.value
            self._count(frame)
            if frame["type"] == "MachineStateChanged":
                changed_machines.add(frame["payload"].get("equipmentId"))
        self._count_buffer(frames)
        self._counts()
        if cycles is not None and changed_machines:
            for equipment_id, n in cycles(sorted(m for m in changed_machines if m)).items():
                if (equipment_id, "Cycle Count") in self.values:
                    self.values[(equipment_id, "Cycle Count")] = n
        self.seq = self.values[(NODE, EVENT_SEQ)] = frames[-1]["seq"]
        at = millis(frames[-1]["at"])
        # Line/EventSeq and Line/LastPiece are the format's to write: once per event, per piece.
        return [Change(d, n, value, at) for (d, n), value in self.values.items()
                if before.get((d, n)) != value and n not in (EVENT_SEQ, LAST_PIECE)]

    def _count(self, frame: dict) -> None:
        kind, p = frame["type"], frame.get("payload") or {}
        if not isinstance(p.get("id"), int):
            return
        if kind.startswith("WorkOrder") and "status" in p:
            (self.orders.discard if p["status"] in WORK_ORDER_TERMINAL else self.orders.add)(p["id"])
        elif kind.startswith("Alarm") and "status" in p:
            (self.alarms.add if p["status"] in ALARM_ACTIVE else self.alarms.discard)(p["id"])
        elif kind.startswith("ManualAction") and "status" in p:
            (self.actions.add if p["status"] == "OPEN" else self.actions.discard)(p["id"])
        elif kind == "JobFinished" and p.get("status") in ("COMPLETED", "SCRAPPED"):
            key = (NODE, "Line/Completed" if p["status"] == "COMPLETED" else "Line/Scrapped")
            self.values[key] = int(self.values.get(key) or 0) + 1

    def _count_buffer(self, frames: list[dict]) -> None:
        """The buffer's slots follow the jobs' ``tempSlotNo`` (it has no table)."""
        for frame in frames:
            p = frame.get("payload") or {}
            if not frame["type"].startswith("Job") or not isinstance(p.get("id"), int) or "tempSlotNo" not in p:
                continue
            old = self.buffer_of_job.pop(p["id"], None)
            if old is not None and self.values.get((BUFFER, f"Slot/{old}/Job Id")) == p["id"]:
                self.values[(BUFFER, f"Slot/{old}/Job Id")] = None
            slot = p.get("tempSlotNo")
            if slot is not None and p.get("status") not in JOB_TERMINAL and (BUFFER, f"Slot/{slot}/Job Id") in \
                    self.values:
                self.buffer_of_job[p["id"]] = slot
                self.values[(BUFFER, f"Slot/{slot}/Job Id")] = p["id"]


def event_changes(frame: dict, catalog: Catalog) -> list[Change]:
    """What one event states by itself (no totals): as true for a historical event as for a live one."""
    kind, p, at = frame["type"], frame.get("payload") or {}, millis(frame.get("at"))
    out: list[Change] = []
    if kind == "MachineStateChanged":
        out.append(Change(str(p.get("equipmentId")), STATE, p.get("state"), at))
    elif kind.startswith("Alarm") and p.get("code") == EQUIPMENT_FAULT and p.get("equipmentId"):
        code = _int_or_none((p.get("facts") or {}).get("fault")) if p.get("status") != "CLEARED" else None
        out.append(Change(str(p["equipmentId"]), FAULT_CODE, code, at))
    elif kind == "SlotChanged":
        device, n = str(p.get("equipmentId")), p.get("slotNo")
        out += [Change(device, f"Slot/{n}/Status", p.get("status"), at),
                Change(device, f"Slot/{n}/Job Id", p.get("currentJobId"), at)]
    elif kind == "DockChanged":
        out.append(Change(DOCK, "Pieces Waiting", p.get("piecesWaiting"), at))
    elif kind == "PlcConnection":
        out.append(Change(NODE, PLC_CONNECTED, bool(p.get("connected")), at))
    elif kind.startswith("Task") and p.get("kind") in ROBOT_TASKS and isinstance(p.get("id"), int):
        if p.get("status") == "RUNNING":
            out += [Change(ROBOT, "Task/Id", p["id"], at), Change(ROBOT, "Task/Kind", p["kind"], at)]
        elif p.get("status") in ("SUCCEEDED", "FAILED", "CANCELLED"):
            out += [Change(ROBOT, "Task/Id", None, at), Change(ROBOT, "Task/Kind", None, at)]
    return [c for c in out if (c.device, c.name) in catalog.types]


@dataclass(frozen=True)
class FinishedPiece:
    """A piece a transaction finished: the ``JobFinished`` frame that ended it, and its
    record's summary with its steps (``shared.piece_query.finished_summaries``)."""
    frame: dict
    summary: dict


def finished_jobs(frames: list[dict]) -> list[tuple[int, dict]]:
    """The pieces a transaction finished (``JobFinished`` COMPLETED or SCRAPPED), in
    event order: ``(job id, its event's frame)``."""
    return [(f["payload"]["id"], f) for f in frames
            if f["type"] == "JobFinished" and isinstance((f.get("payload") or {}).get("id"), int)
            and f["payload"].get("status") in FINISHED]


def _int_or_none(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


CYCLES_SQL = ("SELECT equipment_id, count(*) FROM machine_cycle WHERE NOT aborted AND ended_at IS NOT NULL"
              " AND equipment_id = ANY(:ids) GROUP BY equipment_id")
