"""A PLC for the tests written from deploy/REGISTER_MAP.md alone.

It imports neither the simulator's cell model (services/hardware/sim: model
and its parts) nor the offsets of services/hardware/plc: every offset and every
rule below is copied from the document, so a drift between the map and the code
that claims to follow it fails a test. The layout (deploy/line.yaml, through
shared.layout) gives the base addresses and station numbers, as the map says.

The cell is small: a robot whose moves take the map's durations, a dock that
gets pallets, a buffer table, and machines whose cycles run on asyncio timers
(batch machines all started slots at once, the others one slot after another).
Faults are Python methods, not registers: this PLC has no simulator control
block. It publishes its identity in the identity block (the line's, unless
told another, or none).

What it shares with the product's simulator is the socket plumbing only:
services/hardware/sim/modbus_transport.py serves a register image over Modbus
TCP on an asyncio loop in a thread (pymodbus' server, start, stop, down time),
knowing no offset and no rule of the map. Its request hook, :meth:`_on_request`,
is this PLC's own: it applies writes and reacts to strobes as the map says.
"""

from __future__ import annotations

import asyncio
import logging
import random
from dataclasses import dataclass, field

from services.hardware.sim.modbus_transport import ModbusTransport
from shared.layout import EquipmentRegisters, EquipmentSpec, Layout

log = logging.getLogger(__name__)


class Identity:
    """Identity block (REGISTER_MAP.md, "Identity block"): at ``plc.identityBlock.base``
    (0 by default), 20 registers, read-only."""

    SIZE = 20
    MAP_VERSION, IDENTITY, IDENTITY_LEN = 0, 1, 16
    VERSION = 1  # the map's version, as the document states it


class Robot:
    """Robot block offsets (REGISTER_MAP.md, "Robot block"); 48 registers."""

    SIZE = 48
    CMD_ID, CMD_CODE, SRC_STATION, SRC_SLOT, DST_STATION, DST_SLOT, AUX_SLOT = range(7)
    JOB_ID, JOB2_ID = 7, 9
    FAULT, ACK_ID, STATE, DONE_ID, ERROR_CODE = 11, 12, 13, 14, 15
    TEXT_IN, TEXT_OUT, TEXT_LEN = 16, 32, 16
    IDLE, BUSY, DONE, ERROR = 0, 1, 2, 3


class Dock:
    SIZE = 4
    PIECES, ARRIVAL_SEQ = 0, 1


class Machine:
    """Machine block header, then 8 registers per slot."""

    HEADER, SLOT_SIZE = 8, 8
    START_ID, ACK_ID, ERROR_CODE, RUNNING, FAULT, ABORT_ID, ABORT_ACK_ID = range(7)
    OCCUPIED, DONE, RESULT, JOB_ID, SLOT_RUNNING, START = 0, 1, 2, 3, 5, 6
    PASS, FAIL = 1, 2


# Command codes and their durations in seconds (divided by the speed). The map
# gives no duration for BUFFER_TO_DOCK; it is taken as a dock→buffer move.
DOCK_TO_BUFFER, BUFFER_TO_EQUIPMENT, EQUIPMENT_TO_BUFFER, SWAP, SCAN, MARK, BUFFER_TO_DOCK = range(1, 8)
DURATIONS = {DOCK_TO_BUFFER: 6, BUFFER_TO_EQUIPMENT: 8, EQUIPMENT_TO_BUFFER: 8, SWAP: 14, SCAN: 3, MARK: 5,
             BUFFER_TO_DOCK: 6}

# PLC error codes.
NO_PIECE, OCCUPIED, GRIPPER, INVALID, BUSY, MACHINE_FAULT, NOTHING_TO_START, EMERGENCY_STOP = range(1, 9)


class Refused(Exception):
    """A robot move that cannot be made; ``code`` is its PLC error code."""

    def __init__(self, code: int):
        super().__init__(code)
        self.code = code


@dataclass
class Cell:
    """A machine's cycles: the slots started and not yet done, in their turn."""

    regs: EquipmentRegisters
    spec: EquipmentSpec
    in_cycle: list[int] = field(default_factory=list)  # slot numbers, head first
    timer: asyncio.TimerHandle | None = None
    hung: bool = False
    hung_end_waiting: bool = False  # a hung cycle's end, run by clear()


class RegisterMapPlc(ModbusTransport):
    def __init__(self, layout: Layout, host: str, port: int, speed: float = 200.0, scrap_rate: float = 0.0,
                 *, pallet_size: int = 4, pallet_seconds: float = 30.0, seed: int | None = None,
                 identity: str | None = ""):
        if layout.plc is None:
            raise ValueError("the layout has no plc: register map")
        super().__init__(host, port)
        self.layout, self.map = layout, layout.plc
        self.speed, self.scrap_rate = speed, scrap_rate
        self.pallet_size, self.pallet_seconds = pallet_size, pallet_seconds
        self.rng = random.Random(seed)
        self.marks: list[tuple[int, str]] = []  # (buffer slot, text) of every MARK made
        self.cells = {e.equipment_id: Cell(e, layout.equipment_by_id(e.equipment_id)) for e in self.map.equipment}
        ends = [self.map.identity_base + Identity.SIZE, self.map.robot_base + Robot.SIZE,
                self.map.dock_base + Dock.SIZE,
                self.map.buffer_base + layout.buffer_slots] + [e.base + e.size for e in self.map.equipment]
        self.regs = [0] * max(ends)  # the whole register image, host and PLC registers alike
        # What it says it is: "" (the default) the line's, as the layout expects it
        # (plc.identity, else line.id); None: a PLC without the identity block.
        self.identity = (layout.plc.identity or layout.id) if identity == "" else identity
        self._write_identity()
        # the action being executed: (action id, code, the command registers as strobed);
        # latched, as a PLC does, so a host writing the next command early changes nothing
        self._robot_action: tuple[int, int, list[int]] | None = None
        self._robot_timer: asyncio.TimerHandle | None = None
        self._robot_hang_next = False
        self._robot_hung = False  # the action being executed waits for clear()
        self._pallet_timer: asyncio.TimerHandle | None = None
        self._pallet_arrives()

    # -- served over Modbus TCP (services/hardware/sim/modbus_transport.py) -------

    def _unit_id(self) -> int:
        return self.map.unit_id

    def _register_count(self) -> int:
        return len(self.regs)

    def _later(self, seconds: float, fn, *args) -> asyncio.TimerHandle:
        return self._loop.call_later(seconds / self.speed, fn, *args)

    # -- faults, as Python methods ---------------------------------------------

    def fault(self, equipment_id: str, code: int = MACHINE_FAULT) -> None:
        """The machine faults now: FAULT = code, its cycles abort (pieces stay)."""
        self._on_loop(self._fault, self.cells[equipment_id], code)

    def hang(self, equipment_id: str) -> None:
        """The machine's cycles never end until clear()."""
        self._on_loop(setattr, self.cells[equipment_id], "hung", True)

    def robot_hang(self) -> None:
        """The next robot action is acknowledged and stays in flight until clear()
        (then it is made), an emergency stop or a restart."""
        self._on_loop(setattr, self, "_robot_hang_next", True)

    def emergency_stop(self) -> None:
        self._on_loop(self._emergency_stop)

    def clear(self) -> None:
        """Every fault and the emergency stop gone; hung cycles end now."""
        self._on_loop(self._clear)

    def restart(self, seconds: float, identity: str | None = "") -> None:
        """Restart: every connection dropped, none accepted for ``seconds``, then
        back with the registers of a PLC that just started; pieces kept. Returns
        once the connections are dropped. ``identity`` (given): it comes back as
        that PLC (None: one without the identity block)."""

        async def go():
            self._reset_registers()
            if identity != "":
                self.identity = identity
                self._write_identity()
            await self.drop_connections(seconds)

        asyncio.run_coroutine_threadsafe(go(), self._loop).result(10.0)

    # -- requests --------------------------------------------------------------

    async def _on_request(self, _function_code, start_address, address, _count, registers, set_values):
        if set_values is not None:
            self.regs[address:address + len(set_values)] = [int(v) for v in set_values]
            self._on_write(range(address, address + len(set_values)))
            self._write_identity()  # the block is read-only: a write to it changes nothing
        registers[:] = self.regs[start_address:start_address + len(registers)]
        return None

    def _on_write(self, written: range) -> None:
        if self.map.robot_base + Robot.CMD_ID in written:
            self._robot_strobe()
        for cell in self.cells.values():
            if cell.regs.base + Machine.START_ID in written:
                self._start_strobe(cell)
            if cell.regs.base + Machine.ABORT_ID in written:
                self._abort_strobe(cell)

    def _set_u32(self, address: int, value: int) -> None:
        self.regs[address], self.regs[address + 1] = (value >> 16) & 0xFFFF, value & 0xFFFF

    def _write_identity(self) -> None:
        """MAP_VERSION, then the identity as ASCII, two characters a register, high
        byte first, NUL-padded; all 0 for a PLC without the block."""
        base = self.map.identity_base
        block = [0] * Identity.SIZE
        if self.identity is not None:
            raw = self.identity.encode("ascii").ljust(2 * Identity.IDENTITY_LEN, b"\0")
            block[Identity.MAP_VERSION] = Identity.VERSION
            for i in range(Identity.IDENTITY_LEN):
                block[Identity.IDENTITY + i] = (raw[2 * i] << 8) | raw[2 * i + 1]
        self.regs[base:base + Identity.SIZE] = block

    # -- dock and buffer -------------------------------------------------------

    def _pallet_arrives(self) -> None:
        d = self.map.dock_base
        self._pallet_timer = None
        self.regs[d + Dock.PIECES] += self.pallet_size
        self.regs[d + Dock.ARRIVAL_SEQ] = (self.regs[d + Dock.ARRIVAL_SEQ] + 1) % 65536

    def _buffer_address(self, station: int, slot: int) -> int:
        if station != self.map.buffer_station or not 1 <= slot <= self.layout.buffer_slots:
            raise Refused(INVALID)
        return self.map.buffer_base + slot - 1

    def _slot_address(self, station: int, slot: int) -> tuple[Cell, int]:
        cell = next((c for c in self.cells.values() if c.regs.station == station), None)
        if cell is None or not 1 <= slot <= cell.regs.slots:
            raise Refused(INVALID)
        return cell, self._slot_base(cell, slot)

    @staticmethod
    def _slot_base(cell: Cell, slot: int) -> int:
        return cell.regs.base + Machine.HEADER + Machine.SLOT_SIZE * (slot - 1)

    # -- robot -----------------------------------------------------------------

    def _robot_strobe(self) -> None:
        r, regs = self.map.robot_base, self.regs
        action_id = regs[r + Robot.CMD_ID]
        if action_id == 0 or action_id == regs[r + Robot.ACK_ID] or self._robot_action is not None:
            return  # not new, or the robot is busy: never acknowledged
        code = regs[r + Robot.CMD_CODE]
        regs[r + Robot.ACK_ID], regs[r + Robot.STATE] = action_id, Robot.BUSY
        self._robot_action = (action_id, code, regs[r:r + Robot.TEXT_IN + Robot.TEXT_LEN])
        if regs[r + Robot.FAULT]:
            self._robot_finished(regs[r + Robot.FAULT])
        elif code not in DURATIONS:
            self._robot_finished(INVALID)
        elif self._robot_hang_next:
            self._robot_hang_next, self._robot_hung = False, True
        else:
            self._robot_timer = self._later(DURATIONS[code], self._robot_arrives)

    def _robot_arrives(self) -> None:
        self._robot_timer = None
        try:
            self._move(*self._robot_action[1:])
        except Refused as refused:
            self._robot_finished(refused.code)
        else:
            self._robot_finished(0)

    def _robot_finished(self, error: int) -> None:
        r, regs = self.map.robot_base, self.regs
        action_id = self._robot_action[0]
        self._robot_action = None
        if self._robot_timer is not None:
            self._robot_timer.cancel()
            self._robot_timer = None
        regs[r + Robot.ERROR_CODE] = error
        regs[r + Robot.STATE] = Robot.ERROR if error else Robot.DONE
        regs[r + Robot.DONE_ID] = action_id
        self._robot_hung = False

    def _move(self, code: int, command: list[int]) -> None:
        """Make the move (all checks first: a refused move moves nothing)."""
        regs = self.regs
        src = (command[Robot.SRC_STATION], command[Robot.SRC_SLOT])
        dst = (command[Robot.DST_STATION], command[Robot.DST_SLOT])
        job = (command[Robot.JOB_ID] << 16) | command[Robot.JOB_ID + 1]
        job2 = (command[Robot.JOB2_ID] << 16) | command[Robot.JOB2_ID + 1]
        dock = self.map.dock_base + Dock.PIECES
        if code == DOCK_TO_BUFFER:
            if src[0] != self.map.dock_station:
                raise Refused(INVALID)
            target = self._buffer_address(*dst)
            if regs[dock] == 0:
                raise Refused(NO_PIECE)
            if regs[target]:
                raise Refused(OCCUPIED)
            regs[dock] -= 1
            regs[target] = 1
            if regs[dock] == 0 and self._pallet_timer is None:
                self._pallet_timer = self._later(self.pallet_seconds, self._pallet_arrives)
        elif code == BUFFER_TO_DOCK:
            source = self._buffer_address(*src)
            if dst[0] != self.map.dock_station:
                raise Refused(INVALID)
            if not regs[source]:
                raise Refused(NO_PIECE)
            regs[source] = 0  # out of the cell
        elif code == BUFFER_TO_EQUIPMENT:
            source = self._buffer_address(*src)
            cell, slot = self._slot_address(*dst)
            if not regs[source]:
                raise Refused(NO_PIECE)
            self._machine_accessible(cell, slot)
            if regs[slot + Machine.OCCUPIED]:
                raise Refused(OCCUPIED)
            regs[source] = 0
            self._put_in_slot(slot, job)
        elif code == EQUIPMENT_TO_BUFFER:
            cell, slot = self._slot_address(*src)
            target = self._buffer_address(*dst)
            if not regs[slot + Machine.OCCUPIED]:
                raise Refused(NO_PIECE)
            if regs[slot + Machine.SLOT_RUNNING]:  # a faulted machine may be unloaded, a running one not
                raise Refused(BUSY)
            if regs[target]:
                raise Refused(OCCUPIED)
            self._empty_slot(slot)
            regs[target] = 1
        elif code == SWAP:
            self._swap(src, dst, command[Robot.AUX_SLOT], job2)
        elif code in (SCAN, MARK):
            self._tool_step(code, src, job, command)

    def _swap(self, src: tuple[int, int], dst: tuple[int, int], aux_slot: int, job2: int) -> None:
        """The machine's piece onto buffer slot ``dst``, the piece on ``aux_slot`` into the machine."""
        regs = self.regs
        cell, slot = self._slot_address(*src)
        unload_to = self._buffer_address(*dst)
        load_from = self._buffer_address(self.map.buffer_station, aux_slot)
        if unload_to == load_from:
            raise Refused(INVALID)
        if not regs[slot + Machine.OCCUPIED] or not regs[load_from]:
            raise Refused(NO_PIECE)
        self._machine_accessible(cell, slot)
        if regs[unload_to]:
            raise Refused(OCCUPIED)
        regs[unload_to], regs[load_from] = 1, 0
        self._put_in_slot(slot, job2)

    def _tool_step(self, code: int, src: tuple[int, int], job: int, command: list[int]) -> None:
        """SCAN or MARK a piece on a buffer slot: nothing moves."""
        if not self.regs[self._buffer_address(*src)]:
            raise Refused(NO_PIECE)
        if code == SCAN:
            self._write_text(self.map.robot_base + Robot.TEXT_OUT, f"RM-{job or self.rng.randrange(1, 10**6):08d}")
        else:
            text = command[Robot.TEXT_IN:Robot.TEXT_IN + Robot.TEXT_LEN]
            raw = b"".join(bytes([v >> 8, v & 0xFF]) for v in text)
            self.marks.append((src[1], raw.rstrip(b"\0").decode("ascii", errors="replace")))

    def _machine_accessible(self, cell: Cell, slot: int) -> None:
        """A slot the robot may load: the machine not faulted, the slot not in its cycle."""
        if self.regs[cell.regs.base + Machine.FAULT]:
            raise Refused(self.regs[cell.regs.base + Machine.FAULT])
        if self.regs[slot + Machine.SLOT_RUNNING]:
            raise Refused(BUSY)

    def _write_text(self, address: int, text: str) -> None:
        raw = text.encode("ascii")[:2 * Robot.TEXT_LEN].ljust(2 * Robot.TEXT_LEN, b"\0")
        self.regs[address:address + Robot.TEXT_LEN] = [raw[i] << 8 | raw[i + 1] for i in range(0, len(raw), 2)]

    def _put_in_slot(self, slot: int, job: int) -> None:
        self.regs[slot + Machine.OCCUPIED] = 1
        self.regs[slot + Machine.DONE] = self.regs[slot + Machine.RESULT] = 0
        self._set_u32(slot + Machine.JOB_ID, job)

    def _empty_slot(self, slot: int) -> None:
        self.regs[slot:slot + Machine.SLOT_SIZE] = [0] * Machine.SLOT_SIZE

    # -- machines --------------------------------------------------------------

    def _start_strobe(self, cell: Cell) -> None:
        base, regs = cell.regs.base, self.regs
        action_id = regs[base + Machine.START_ID]
        if action_id == 0 or action_id == regs[base + Machine.ACK_ID]:
            return
        slots = range(1, cell.regs.slots + 1)
        flagged = [n for n in slots if regs[self._slot_base(cell, n) + Machine.START]]
        for n in slots:
            regs[self._slot_base(cell, n) + Machine.START] = 0
        chosen = flagged or [n for n in slots if self._idle_loaded(cell, n)]
        if regs[base + Machine.FAULT]:
            error = regs[base + Machine.FAULT]
        elif not chosen:
            error = NOTHING_TO_START
        elif any(not regs[self._slot_base(cell, n) + Machine.OCCUPIED] for n in chosen):
            error = NO_PIECE
        elif (cell.spec.batch and cell.in_cycle) or any(n in cell.in_cycle for n in chosen):
            error = BUSY
        else:
            error = 0
            self._begin_cycles(cell, chosen)
        regs[base + Machine.ERROR_CODE] = error
        regs[base + Machine.ACK_ID] = action_id

    def _idle_loaded(self, cell: Cell, n: int) -> bool:
        s = self._slot_base(cell, n)
        return bool(self.regs[s + Machine.OCCUPIED]) and not self.regs[s + Machine.DONE] and n not in cell.in_cycle

    def _begin_cycles(self, cell: Cell, slots: list[int]) -> None:
        for n in slots:
            s = self._slot_base(cell, n)
            self.regs[s + Machine.DONE] = self.regs[s + Machine.RESULT] = 0
            self.regs[s + Machine.SLOT_RUNNING] = 1  # also while waiting for its turn
        idle = not cell.in_cycle
        cell.in_cycle.extend(slots)
        if idle:
            cell.timer = self._later(cell.spec.cycle_seconds, self._cycle_ends, cell)
        self.regs[cell.regs.base + Machine.RUNNING] = 1

    def _cycle_ends(self, cell: Cell) -> None:
        cell.timer = None
        if cell.hung:
            cell.hung_end_waiting = True
            return
        finished = cell.in_cycle if cell.spec.batch else cell.in_cycle[:1]
        cell.in_cycle = [n for n in cell.in_cycle if n not in finished]
        for n in finished:
            s = self._slot_base(cell, n)
            self.regs[s + Machine.SLOT_RUNNING] = 0
            if cell.spec.inspection:
                self.regs[s + Machine.RESULT] = Machine.FAIL if self.rng.random() < self.scrap_rate else Machine.PASS
            self.regs[s + Machine.DONE] = 1
        if cell.in_cycle:
            cell.timer = self._later(cell.spec.cycle_seconds, self._cycle_ends, cell)
        self.regs[cell.regs.base + Machine.RUNNING] = int(bool(cell.in_cycle))

    def _abort_cycles(self, cell: Cell) -> None:
        """Every cycle of the machine stops where it is: no DONE, the pieces stay."""
        if cell.timer is not None:
            cell.timer.cancel()
            cell.timer = None
        cell.hung_end_waiting = False
        for n in cell.in_cycle:
            self.regs[self._slot_base(cell, n) + Machine.SLOT_RUNNING] = 0
        cell.in_cycle = []
        self.regs[cell.regs.base + Machine.RUNNING] = 0

    def _abort_strobe(self, cell: Cell) -> None:
        base = cell.regs.base
        action_id = self.regs[base + Machine.ABORT_ID]
        if action_id == 0 or action_id == self.regs[base + Machine.ABORT_ACK_ID]:
            return
        self._abort_cycles(cell)
        self.regs[base + Machine.ABORT_ACK_ID] = action_id

    # -- faults ----------------------------------------------------------------

    def _fault(self, cell: Cell, code: int) -> None:
        self.regs[cell.regs.base + Machine.FAULT] = code
        self._abort_cycles(cell)

    def _emergency_stop(self) -> None:
        for cell in self.cells.values():
            self._fault(cell, EMERGENCY_STOP)
        self.regs[self.map.robot_base + Robot.FAULT] = EMERGENCY_STOP
        if self._robot_action is not None:
            self._robot_finished(EMERGENCY_STOP)

    def _clear(self) -> None:
        self.regs[self.map.robot_base + Robot.FAULT] = 0
        self._robot_hang_next = False
        if self._robot_hung:
            self._robot_arrives()
        for cell in self.cells.values():
            self.regs[cell.regs.base + Machine.FAULT] = 0
            cell.hung = False
            if cell.hung_end_waiting:
                cell.hung_end_waiting = False
                self._cycle_ends(cell)

    def _reset_registers(self) -> None:
        """REGISTER_MAP.md, "PLC restart": what a PLC knows after it started again."""
        r, regs = self.map.robot_base, self.regs
        if self._robot_timer is not None:
            self._robot_timer.cancel()  # the action in flight is forgotten: it never reports
        self._robot_action = self._robot_timer = None
        self._robot_hang_next = self._robot_hung = False
        for offset in (Robot.ACK_ID, Robot.STATE, Robot.DONE_ID, Robot.ERROR_CODE, Robot.FAULT):
            regs[r + offset] = 0
        for cell in self.cells.values():
            self._abort_cycles(cell)
            cell.hung = False
            base = cell.regs.base
            regs[base:base + Machine.HEADER] = [0] * Machine.HEADER
            for n in range(1, cell.regs.slots + 1):
                s = self._slot_base(cell, n)
                occupied = regs[s + Machine.OCCUPIED]
                regs[s:s + Machine.SLOT_SIZE] = [0] * Machine.SLOT_SIZE
                regs[s + Machine.OCCUPIED] = occupied
        regs[self.map.dock_base + Dock.ARRIVAL_SEQ] = 0

    # -- for tests -------------------------------------------------------------

    def registers(self, address: int, count: int) -> list[int]:
        return self._on_loop(lambda: self.regs[address:address + count])
