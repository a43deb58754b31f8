"""The OPC UA node map (deploy/OPCUA_MAP.md): the cell as one object tree
under a fixed namespace URI, with stable browse names. The counterpart of
:mod:`services.hardware.plc` (the register map): both the simulator's OPC UA
server and the hardware service's OPC UA driver import it, so they cannot
drift. No asyncua here: NodeIds are strings (``nsu=<uri>;s=<id>``, resolved
to a namespace index once connected).

Every signal is a *signal key* ``<Device>.<Name>`` (``Robot.AckId``,
``MC1.Slot2.Done``); its default NodeId is ``nsu=urn:linectl:cell;s=<key>`` and
its browse path ``Objects/<Device>/…/<Name>`` in the same namespace. A layout
may give other NodeIds per device (``opcua:`` in line.yaml, checked by
:func:`shared.layout.parse_opcua_nodes`).

Values and codes are those of the register map: the same action ids (UInt16,
1..65535), job numbers (UInt32), robot states, command codes and PLC error
codes. Where a companion specification fits, a machine also shows its state
as OPC 40001-1 ``MachineryItemState``, a slot's cycle as the MachineTool
``ProductionProgram`` state and an inspection verdict as Machinery Result's
``ResultEvaluation``.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.hardware import plc as P
from shared.layout import Layout, LayoutError

NAMESPACE_URI = "urn:linectl:cell"

ROBOT, DOCK, BUFFER, SIM_CONTROL = "Robot", "Dock", "Buffer", "SimControl"
# The cell object: what the PLC says about itself (its identity, read on every connect).
CELL = "Cell"
IDENTITY = f"{CELL}.Identity"

# OPC 40001-1 MachineryItemState_StateMachineType: the states a machine shows.
MACHINERY_NOT_EXECUTING = "NotExecuting"
MACHINERY_EXECUTING = "Executing"
MACHINERY_OUT_OF_SERVICE = "OutOfService"  # a fault (the Fault variable says which)

# OPC 40501-1 (MachineTool) ProductionProgramState: a slot's cycle.
PROGRAM_INITIALIZING = "Initializing"  # no cycle since the piece was loaded (or no piece)
PROGRAM_RUNNING = "Running"
PROGRAM_ENDED = "Ended"                # the cycle finished (Done is true)
PROGRAM_ABORTED = "Aborted"            # stopped by an abort, a fault or an emergency stop

# OPC 40001-101 (Machinery Result) ResultEvaluationEnum: an inspection verdict. The
# numbers are the register map's S_RESULT values (0 none, 1 pass, 2 fail).
RESULT_UNDEFINED, RESULT_OK, RESULT_NOT_OK, RESULT_NOT_DECIDABLE = 0, 1, 2, 3
assert (RESULT_OK, RESULT_NOT_OK) == (P.RESULT_PASS, P.RESULT_FAIL)

# Variant types by name (asyncua's ua.VariantType member names).
UINT16, UINT32, INT32, BOOLEAN, STRING = "UInt16", "UInt32", "Int32", "Boolean", "String"


@dataclass(frozen=True)
class Signal:
    key: str         # "Robot.AckId", "MC1.Slot2.Done"
    device: str      # "Robot", "MC1"
    path: tuple[str, ...]  # browse names under the device object: ("Slot2", "Done")
    type: str        # one of the variant type names above


@dataclass(frozen=True)
class Method:
    key: str         # "Robot.Execute"
    device: str
    name: str
    inputs: tuple[tuple[str, str], ...]   # (argument name, variant type name); "[]" suffix: an array
    outputs: tuple[tuple[str, str], ...]


CELL_SIGNALS = (("Identity", STRING),)
ROBOT_SIGNALS = (("Fault", UINT16), ("AckId", UINT16), ("State", UINT16), ("DoneId", UINT16),
                 ("ErrorCode", UINT16), ("ScanText", STRING))
DOCK_SIGNALS = (("Pieces", UINT16), ("Arrivals", UINT16))
MACHINE_SIGNALS = (("AckId", UINT16), ("ErrorCode", UINT16), ("AbortAckId", UINT16), ("Running", BOOLEAN),
                   ("Fault", UINT16), ("MachineryItemState", STRING))
SLOT_SIGNALS = (("Occupied", BOOLEAN), ("Running", BOOLEAN), ("Done", BOOLEAN), ("JobId", UINT32),
                ("ResultEvaluation", INT32), ("ProductionProgramState", STRING))
# What the driver subscribes to per slot (the companion-spec states are for other clients).
SLOT_WATCHED = ("Occupied", "Running", "Done", "JobId", "ResultEvaluation")
MACHINE_WATCHED = ("AckId", "ErrorCode", "AbortAckId", "Running", "Fault")

ACCEPTED = (("Accepted", BOOLEAN),)
EXECUTE_INPUTS = (("ActionId", UINT16), ("Command", UINT16), ("SourceStation", UINT16), ("SourceSlot", UINT16),
                  ("TargetStation", UINT16), ("TargetSlot", UINT16), ("AuxSlot", UINT16), ("JobId", UINT32),
                  ("Job2Id", UINT32), ("Text", STRING))
START_INPUTS = (("ActionId", UINT16), ("Slots", UINT16 + "[]"), ("JobIds", UINT32 + "[]"))
ABORT_INPUTS = (("ActionId", UINT16),)

# The simulator's fault injection (the register map's "Simulator control" block as methods).
SIM_CONTROL_METHODS = (
    ("RobotError", (("Code", UINT16),)),
    ("RobotHang", ()),
    ("MachineFault", (("EquipmentId", STRING),)),
    ("MachineHang", (("EquipmentId", STRING),)),
    ("Drop", (("Milliseconds", UINT32),)),
    ("Delay", (("Milliseconds", UINT32),)),
    ("ScrapRate", (("PerMille", UINT16),)),
    ("EmergencyStop", ()),
    ("RestartPlc", (("Milliseconds", UINT32),)),
    ("Clear", ()),
    ("TakeFromBuffer", (("Slot", UINT16),)),
)


def slot_name(slot_no: int) -> str:
    return f"Slot{slot_no}"


def signals(layout: Layout) -> list[Signal]:
    """Every variable of the cell, in a stable order."""
    out = [Signal(f"{CELL}.{n}", CELL, (n,), t) for n, t in CELL_SIGNALS]
    out += [Signal(f"{ROBOT}.{n}", ROBOT, (n,), t) for n, t in ROBOT_SIGNALS]
    out += [Signal(f"{DOCK}.{n}", DOCK, (n,), t) for n, t in DOCK_SIGNALS]
    out += [Signal(f"{BUFFER}.{slot_name(i)}", BUFFER, (slot_name(i),), BOOLEAN)
            for i in range(1, layout.buffer_slots + 1)]
    for e in layout.equipment:
        out += [Signal(f"{e.id}.{n}", e.id, (n,), t) for n, t in MACHINE_SIGNALS]
        for s in range(1, e.slots + 1):
            out += [Signal(f"{e.id}.{slot_name(s)}.{n}", e.id, (slot_name(s), n), t) for n, t in SLOT_SIGNALS]
    return out


def methods(layout: Layout) -> list[Method]:
    out = [Method(f"{ROBOT}.Execute", ROBOT, "Execute", EXECUTE_INPUTS, ACCEPTED)]
    for e in layout.equipment:
        out.append(Method(f"{e.id}.Start", e.id, "Start", START_INPUTS, ACCEPTED))
        out.append(Method(f"{e.id}.Abort", e.id, "Abort", ABORT_INPUTS, ACCEPTED))
    return out


def devices(layout: Layout) -> list[str]:
    return [CELL, ROBOT, DOCK, BUFFER, *(e.id for e in layout.equipment)]


def default_node_id(key: str) -> str:
    return f"nsu={NAMESPACE_URI};s={key}"


def node_ids(layout: Layout) -> dict[str, str]:
    """Signal and method key → NodeId string: the defaults, with the layout's
    ``opcua:`` NodeIds in their place (a method's object is its device's
    ``<Device>`` key)."""
    keys = [s.key for s in signals(layout)] + [m.key for m in methods(layout)] + devices(layout)
    ids = {k: default_node_id(k) for k in keys}
    known = known_names(layout)
    for device, names in (layout.opcua_nodes or {}).items():
        for name, node_id in names.items():
            if name not in known.get(device, ()):
                raise LayoutError(f"opcua.{device}.{name}: no such signal or method in deploy/OPCUA_MAP.md "
                                  f"(known: {', '.join(sorted(known.get(device, ())))})")
            ids[device if name == "." else f"{device}.{name}"] = node_id
    return ids


def known_names(layout: Layout) -> dict[str, set[str]]:
    """Per device, the names a layout may map (``"."``: the device object itself)."""
    names: dict[str, set[str]] = {d: {"."} for d in devices(layout)}
    for s in signals(layout):
        names[s.device].add(".".join(s.path))
    for m in methods(layout):
        names[m.device].add(m.name)
    return names


def machinery_state(running: int, fault: int) -> str:
    if fault:
        return MACHINERY_OUT_OF_SERVICE
    return MACHINERY_EXECUTING if running else MACHINERY_NOT_EXECUTING
