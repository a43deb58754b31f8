"""The simulated line behind the register map: robot, dock, buffer, machines.

Pure Python, no I/O: the Modbus server feeds it every request
(:meth:`LineModel.on_request`) and serves :attr:`LineModel.mem` back. Time is
simulated (wall clock × speed) and advanced lazily on each request, so the
model needs no thread of its own and its state is exactly what a poll sees.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.hardware import plc as P
from shared.layout import EquipmentRegisters, Layout

log = logging.getLogger(__name__)

# Robot action durations in simulated seconds.
ROBOT_SECONDS = {
    P.CMD_DOCK_TO_BUFFER: 6.0,
    P.CMD_BUFFER_TO_EQUIPMENT: 8.0,
    P.CMD_EQUIPMENT_TO_BUFFER: 8.0,
    P.CMD_SWAP: 14.0,
    P.CMD_SCAN: 3.0,
    P.CMD_MARK: 5.0,
    P.CMD_BUFFER_TO_DOCK: 6.0,
}


@dataclass
class SimOptions:
    speed: float = 1.0
    scrap_rate: float = 0.05     # inspection fail probability
    seed: int | None = None      # fixes inspection outcomes and barcodes
    pallet_size: int = 4         # pieces per pallet at the dock
    pallet_seconds: float = 30.0  # simulated delay before the next pallet once the dock is empty


class LineModel:
    def __init__(self, layout: Layout, options: SimOptions, clock: Callable[[], float] = time.monotonic):
        if layout.plc is None:
            raise ValueError("the layout has no plc: register map")
        self.layout = layout
        self.map = layout.plc
        self.options = options
        self.clock = clock
        self.t0 = clock()
        self.rng = random.Random(options.seed)
        self.scrap_permille = round(options.scrap_rate * 1000)
        ends = [self.map.robot_base + 48, self.map.dock_base + 4,
                self.map.buffer_base + layout.buffer_slots, self.map.sim_control_base + 8]
        ends += [e.base + e.size for e in self.map.equipment]
        self.mem = [0] * max(ends)
        self.mem[self.map.sim_control_base + P.C_SCRAP_PERMILLE] = self.scrap_permille
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.robot_fail_next = 0
        self.robot_hang_next = False
        self.robot_hung = False
        self.hung_stations: set[int] = set()
        self._hung_finishes: list[Callable[[], None]] = []
        self.machine_free_at: dict[str, float] = {e.equipment_id: 0.0 for e in self.map.equipment}
        self.drop_request_ms = 0  # read and reset by the server
        self.response_delay_ms = 0
        self.marks: list[tuple[int, str]] = []  # (buffer slot, text), for the log and tests
        # (action id, command code, simulated start, simulated end or None): what the robot did
        self.robot_log: list[list] = []
        self._pallet_arrives()

    # -- time ------------------------------------------------------------------

    def now(self) -> float:
        return (self.clock() - self.t0) * self.options.speed

    def _after(self, seconds: float, fn: Callable[[], None], at: float | None = None) -> None:
        due = (self.now() if at is None else at) + seconds
        heapq.heappush(self._timers, (due, next(self._seq), fn))

    def advance(self) -> None:
        now = self.now()
        while self._timers and self._timers[0][0] <= now:
            _due, _n, fn = heapq.heappop(self._timers)
            fn()

    # -- registers -------------------------------------------------------------

    def on_request(self, address: int, values: list[int] | None) -> None:
        """One Modbus request: advance time, then apply a write."""
        self.advance()
        if values is None:
            return
        for i, v in enumerate(values):
            self.mem[address + i] = int(v)
        touched = range(address, address + len(values))
        if self.map.robot_base + P.R_CMD_ID in touched:
            self._robot_command()
        for e in self.map.equipment:
            if e.base + P.M_START_ID in touched:
                self._machine_start(e)
        control = self.map.sim_control_base
        if control and any(control <= a < control + 8 for a in touched):
            self._control()

    def _u32(self, address: int) -> int:
        return P.join_u32(self.mem[address], self.mem[address + 1])

    def _set_u32(self, address: int, value: int) -> None:
        self.mem[address:address + 2] = P.split_u32(value)

    # -- dock and buffer -------------------------------------------------------

    def _pallet_arrives(self) -> None:
        d = self.map.dock_base
        self.mem[d + P.D_PIECES] += self.options.pallet_size
        self.mem[d + P.D_ARRIVAL_SEQ] = (self.mem[d + P.D_ARRIVAL_SEQ] + 1) & 0xFFFF
        log.info("sim: pallet of %d arrived at the dock", self.options.pallet_size)

    def _buffer(self, slot: int) -> int | None:
        if 1 <= slot <= self.layout.buffer_slots:
            return self.map.buffer_base + slot - 1
        return None

    def _machine_slot(self, station: int, slot: int) -> tuple[EquipmentRegisters, int] | None:
        e = self.map.by_station(station)
        if e is None or not 1 <= slot <= e.slots:
            return None
        return e, e.base + 8 + 8 * (slot - 1)

    # -- robot -----------------------------------------------------------------

    def _robot_command(self) -> None:
        r = self.map.robot_base
        action_id = self.mem[r + P.R_CMD_ID]
        if action_id == 0 or action_id == self.mem[r + P.R_ACK_ID] or self.mem[r + P.R_STATE] == P.ROBOT_BUSY:
            return  # not a new command, or the robot is busy: never acknowledged
        code = self.mem[r + P.R_CMD_CODE]
        self.mem[r + P.R_ACK_ID] = action_id
        self.mem[r + P.R_STATE] = P.ROBOT_BUSY
        self.robot_log.append([action_id, code, self.now(), None])
        if self.robot_hang_next:
            self.robot_hang_next, self.robot_hung = False, True
            log.info("sim: robot action %d hangs (injected)", action_id)
            return
        injected, self.robot_fail_next = self.robot_fail_next, 0
        self._after(ROBOT_SECONDS.get(code, 1.0), lambda: self._robot_finish(action_id, code, injected))

    def _robot_finish(self, action_id: int, code: int, injected: int) -> None:
        r = self.map.robot_base
        error = injected or self._robot_effect(code)
        self.mem[r + P.R_ERROR_CODE] = error
        self.mem[r + P.R_STATE] = P.ROBOT_ERROR if error else P.ROBOT_DONE
        self.mem[r + P.R_DONE_ID] = action_id
        self.robot_log[-1][3] = self.now()
        log.info("sim: robot action %d (code %d) finished, error %d", action_id, code, error)

    def _robot_effect(self, code: int) -> int:
        """Check and apply one robot command; returns a PLC error code or 0 (4: not a
        move that command can make, 1: no piece to take, 2: the place is taken, 6: faulted)."""
        m, r = self.mem, self.map.robot_base
        src = (m[r + P.R_SRC_STATION], m[r + P.R_SRC_SLOT])
        dst = (m[r + P.R_DST_STATION], m[r + P.R_DST_SLOT])
        effect = self._ROBOT_EFFECTS.get(code)
        return effect(self, src, dst, self._u32(r + P.R_JOB_ID)) if effect else 4

    def _dock_to_buffer(self, src: tuple, dst: tuple, job: int) -> int:
        m, dock = self.mem, self.map.dock_base
        b = self._buffer(dst[1])
        if src[0] != self.map.dock_station or dst[0] != self.map.buffer_station or b is None:
            return 4
        if m[dock + P.D_PIECES] == 0:
            return 1
        if m[b]:
            return 2
        m[dock + P.D_PIECES] -= 1
        m[b] = 1
        if m[dock + P.D_PIECES] == 0:
            self._after(self.options.pallet_seconds, self._pallet_arrives)
        return 0

    def _buffer_to_dock(self, src: tuple, dst: tuple, job: int) -> int:
        """Onto the dock's outgoing side: out of the cell."""
        m = self.mem
        b = self._buffer(src[1])
        if src[0] != self.map.buffer_station or dst[0] != self.map.dock_station or b is None:
            return 4
        if not m[b]:
            return 1
        m[b] = 0
        return 0

    def _buffer_to_equipment(self, src: tuple, dst: tuple, job: int) -> int:
        m = self.mem
        b, target = self._buffer(src[1]), self._machine_slot(*dst)
        if src[0] != self.map.buffer_station or b is None or target is None:
            return 4
        e, s = target
        if not m[b]:
            return 1
        if m[e.base + P.M_FAULT]:
            return 6
        if m[s + P.S_OCCUPIED] or m[s + P.S_RUNNING]:
            return 2
        m[b] = 0
        self._load_slot(s, job)
        return 0

    def _equipment_to_buffer(self, src: tuple, dst: tuple, job: int) -> int:
        m = self.mem
        source, b = self._machine_slot(*src), self._buffer(dst[1])
        if dst[0] != self.map.buffer_station or b is None or source is None:
            return 4
        _e, s = source
        if not m[s + P.S_OCCUPIED] or m[s + P.S_RUNNING]:
            return 1
        if m[b]:
            return 2
        self._clear_slot(s)
        m[b] = 1
        return 0

    def _swap(self, src: tuple, dst: tuple, job: int) -> int:
        m, r = self.mem, self.map.robot_base
        source = self._machine_slot(*src)
        unload_to, load_from = self._buffer(dst[1]), self._buffer(m[r + P.R_AUX_SLOT])
        if dst[0] != self.map.buffer_station or None in (source, unload_to, load_from) or unload_to == load_from:
            return 4
        e, s = source
        if not m[s + P.S_OCCUPIED] or m[s + P.S_RUNNING] or not m[load_from]:
            return 1
        if m[unload_to]:
            return 2
        if m[e.base + P.M_FAULT]:
            return 6
        m[unload_to], m[load_from] = 1, 0
        self._load_slot(s, self._u32(r + P.R_JOB2_ID))
        return 0

    def _piece_on_buffer(self, src: tuple) -> int:
        """0 if a tool step's source is a buffer slot with a piece, else its error."""
        b = self._buffer(src[1])
        if src[0] != self.map.buffer_station or b is None:
            return 4
        return 0 if self.mem[b] else 1

    def _scan(self, src: tuple, dst: tuple, job: int) -> int:
        if error := self._piece_on_buffer(src):
            return error
        r = self.map.robot_base
        serial = job if job else self.rng.randrange(10**7, 10**8)
        self.mem[r + P.R_TEXT_OUT:r + P.R_TEXT_OUT + P.TEXT_REGISTERS] = P.encode_text(f"SN{serial:08d}")
        return 0

    def _mark(self, src: tuple, dst: tuple, job: int) -> int:
        if error := self._piece_on_buffer(src):
            return error
        r = self.map.robot_base
        self.marks.append((src[1], P.decode_text(self.mem[r + P.R_TEXT_IN:r + P.R_TEXT_IN + P.TEXT_REGISTERS])))
        return 0

    _ROBOT_EFFECTS = {
        P.CMD_DOCK_TO_BUFFER: _dock_to_buffer,
        P.CMD_BUFFER_TO_DOCK: _buffer_to_dock,
        P.CMD_BUFFER_TO_EQUIPMENT: _buffer_to_equipment,
        P.CMD_EQUIPMENT_TO_BUFFER: _equipment_to_buffer,
        P.CMD_SWAP: _swap,
        P.CMD_SCAN: _scan,
        P.CMD_MARK: _mark,
    }

    def _load_slot(self, s: int, job: int) -> None:
        self.mem[s + P.S_OCCUPIED] = 1
        self.mem[s + P.S_DONE] = 0
        self.mem[s + P.S_RESULT] = 0
        self._set_u32(s + P.S_JOB_ID, job)

    def _clear_slot(self, s: int) -> None:
        self.mem[s:s + 8] = [0] * 8

    # -- machines --------------------------------------------------------------

    def _machine_start(self, e: EquipmentRegisters) -> None:
        m = self.mem
        action_id = m[e.base + P.M_START_ID]
        if action_id == 0 or action_id == m[e.base + P.M_ACK_ID]:
            return
        slots = [e.base + 8 + 8 * i for i in range(e.slots)]
        flagged = [s for s in slots if m[s + P.S_START]]
        for s in slots:
            m[s + P.S_START] = 0
        spec = self.layout.equipment_by_id(e.equipment_id)
        to_start = flagged or [s for s in slots if m[s + P.S_OCCUPIED] and not m[s + P.S_DONE]
                               and not m[s + P.S_RUNNING]]
        if m[e.base + P.M_FAULT]:
            error = 6
        elif spec.batch and m[e.base + P.M_RUNNING]:
            error = 5
        elif not to_start:
            error = 7
        elif any(not m[s + P.S_OCCUPIED] for s in to_start):
            error = 1
        elif any(m[s + P.S_RUNNING] for s in to_start):
            error = 5
        else:
            error = 0
        m[e.base + P.M_ERROR_CODE] = error
        m[e.base + P.M_ACK_ID] = action_id
        if error:
            return
        now = self.now()
        start = max(now, self.machine_free_at[e.equipment_id])
        for i, s in enumerate(to_start):
            m[s + P.S_RUNNING] = 1
            m[s + P.S_DONE] = 0
            m[s + P.S_RESULT] = 0
            # batch machines finish every slot at once; the others one slot after another
            due = start + spec.cycle_seconds * (1 if spec.batch else i + 1)
            self._after(0.0, lambda e=e, s=s: self._cycle_done(e, s), at=due)
        self.machine_free_at[e.equipment_id] = start + spec.cycle_seconds * (1 if spec.batch else len(to_start))
        m[e.base + P.M_RUNNING] = 1

    def _cycle_done(self, e: EquipmentRegisters, s: int) -> None:
        m = self.mem
        if not m[s + P.S_RUNNING]:
            return  # aborted by a fault
        if e.station in self.hung_stations:
            self._hung_finishes.append(lambda: self._cycle_done(e, s))
            return
        m[s + P.S_RUNNING] = 0
        if self.layout.equipment_by_id(e.equipment_id).inspection:
            failed = self.rng.randrange(1000) < m[self.map.sim_control_base + P.C_SCRAP_PERMILLE]
            m[s + P.S_RESULT] = P.RESULT_FAIL if failed else P.RESULT_PASS
        m[s + P.S_DONE] = 1
        self._update_running(e)

    def _update_running(self, e: EquipmentRegisters) -> None:
        running = any(self.mem[e.base + 8 + 8 * i + P.S_RUNNING] for i in range(e.slots))
        self.mem[e.base + P.M_RUNNING] = int(running)
        if not running:
            self.machine_free_at[e.equipment_id] = 0.0

    def _fault(self, e: EquipmentRegisters) -> None:
        self.mem[e.base + P.M_FAULT] = 6
        for i in range(e.slots):
            self.mem[e.base + 8 + 8 * i + P.S_RUNNING] = 0
        self._update_running(e)
        log.info("sim: machine %s faulted (injected)", e.equipment_id)

    # -- fault injection -------------------------------------------------------

    def _control(self) -> None:
        c, m = self.map.sim_control_base, self.mem
        if m[c + P.C_ROBOT_FAIL_NEXT]:
            self.robot_fail_next, m[c + P.C_ROBOT_FAIL_NEXT] = m[c + P.C_ROBOT_FAIL_NEXT], 0
        if m[c + P.C_ROBOT_HANG_NEXT]:
            self.robot_hang_next, m[c + P.C_ROBOT_HANG_NEXT] = True, 0
        if m[c + P.C_FAULT_STATION]:
            e = self.map.by_station(m[c + P.C_FAULT_STATION])
            m[c + P.C_FAULT_STATION] = 0
            if e is not None:
                self._fault(e)
        if m[c + P.C_HANG_STATION]:
            self.hung_stations.add(m[c + P.C_HANG_STATION])
            m[c + P.C_HANG_STATION] = 0
        if m[c + P.C_DROP_MS]:
            self.drop_request_ms, m[c + P.C_DROP_MS] = m[c + P.C_DROP_MS], 0
        self.response_delay_ms = m[c + P.C_RESPONSE_DELAY_MS]
        if m[c + P.C_CLEAR]:
            m[c + P.C_CLEAR] = 0
            self.clear_faults()

    def clear_faults(self) -> None:
        c, m = self.map.sim_control_base, self.mem
        self.robot_fail_next, self.robot_hang_next = 0, False
        self.hung_stations.clear()
        for e in self.map.equipment:
            m[e.base + P.M_FAULT] = 0
        r = self.map.robot_base
        if self.robot_hung:
            self.robot_hung = False
            m[r + P.R_STATE] = P.ROBOT_IDLE  # the hung action is abandoned, never reported
        self.response_delay_ms = m[c + P.C_RESPONSE_DELAY_MS] = 0
        finishes, self._hung_finishes = self._hung_finishes, []
        for fn in finishes:
            fn()
