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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from services.hardware import plc as P
from shared.layout import DOCK_BLOCK, ROBOT_BLOCK, SIM_CONTROL_BLOCK, EquipmentRegisters, Layout

log = logging.getLogger(__name__)

MACHINE_FAULT = 6  # the PLC error code FAULT_STATION sets

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
        ends = [self.map.robot_base + ROBOT_BLOCK, self.map.dock_base + DOCK_BLOCK,
                self.map.buffer_base + layout.buffer_slots, self.map.sim_control_base + SIM_CONTROL_BLOCK]
        ends += [e.base + e.size for e in self.map.equipment]
        self.mem = [0] * max(ends)
        self.mem[self.map.sim_control_base + P.C_SCRAP_PERMILLE] = self.scrap_permille
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.robot_fail_next = 0
        self.robot_hang_next = False
        self.robot_hung = False
        # the robot action being executed (action id, command code, token), or None; its
        # finish timer only acts while the token is current, so an e-stop or a restart can end it
        self._robot_in_flight: tuple[int, int, int] | None = None
        self.hung_stations: set[int] = set()
        self._hung_finishes: list[Callable[[], None]] = []
        self.machine_free_at: dict[str, float] = {e.equipment_id: 0.0 for e in self.map.equipment}
        # slot address -> its running cycle's cycle_log entry; a timer of an aborted cycle finds
        # another entry (or none) and does nothing, also when the slot was started again since
        self._running_cycles: dict[int, list] = {}
        # [equipment id, slot no, simulated start, simulated end or None, "done"/"aborted"/None],
        # the latest cycles (for tests; bounded for a long `linectl sim`)
        self.cycle_log: deque[list] = deque(maxlen=1000)
        self.drop_request_ms = 0  # read and reset by the server
        self.restart_request_ms = 0  # read and reset by the server
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
            if e.base + P.M_ABORT_ID in touched:
                self._machine_abort(e)
        control = self.map.sim_control_base
        if control and any(control <= a < control + SIM_CONTROL_BLOCK for a in touched):
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
        if self.mem[r + P.R_FAULT]:  # the robot cannot move: refused at once, nothing moved
            self._robot_report(action_id, code, self.mem[r + P.R_FAULT])
            return
        token = next(self._seq)
        self._robot_in_flight = (action_id, code, token)
        if self.robot_hang_next:
            self.robot_hang_next, self.robot_hung = False, True
            log.info("sim: robot action %d hangs (injected)", action_id)
            return
        injected, self.robot_fail_next = self.robot_fail_next, 0
        self._after(ROBOT_SECONDS.get(code, 1.0), lambda: self._robot_finish(token, injected))

    def _robot_finish(self, token: int, injected: int) -> None:
        if self._robot_in_flight is None or self._robot_in_flight[2] != token:
            return  # ended by an emergency stop, or forgotten by a restart
        action_id, code, _token = self._robot_in_flight
        self._robot_report(action_id, code, injected or self._robot_effect(code))

    def _robot_report(self, action_id: int, code: int, error: int) -> None:
        r = self.map.robot_base
        self._robot_in_flight = None
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
            return m[e.base + P.M_FAULT]
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
            return m[e.base + P.M_FAULT]
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
            error = m[e.base + P.M_FAULT]
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
            entry = self._running_cycles[s] = [e.equipment_id, self._slot_no(e, s), due - spec.cycle_seconds,
                                               None, None]
            self.cycle_log.append(entry)
            self._after(0.0, lambda e=e, s=s, entry=entry: self._cycle_done(e, s, entry), at=due)
        self.machine_free_at[e.equipment_id] = start + spec.cycle_seconds * (1 if spec.batch else len(to_start))
        m[e.base + P.M_RUNNING] = 1

    @staticmethod
    def _slot_no(e: EquipmentRegisters, s: int) -> int:
        return (s - e.base - 8) // 8 + 1

    def _cycle_done(self, e: EquipmentRegisters, s: int, entry: list) -> None:
        m = self.mem
        if self._running_cycles.get(s) is not entry:
            return  # aborted (a fault, an abort, a restart): no done for this cycle
        if e.station in self.hung_stations:
            self._hung_finishes.append(lambda: self._cycle_done(e, s, entry))
            return
        del self._running_cycles[s]
        entry[3], entry[4] = self.now(), "done"
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

    def _abort_cycles(self, e: EquipmentRegisters) -> None:
        """Every running cycle of the machine stops: RUNNING falls, DONE stays 0, the
        pieces stay in their slots (OCCUPIED, JOB_ID kept)."""
        for i in range(e.slots):
            s = e.base + 8 + 8 * i
            self.mem[s + P.S_RUNNING] = 0
            if (entry := self._running_cycles.pop(s, None)) is not None:
                entry[3], entry[4] = self.now(), "aborted"
        self._update_running(e)

    def _machine_abort(self, e: EquipmentRegisters) -> None:
        m = self.mem
        action_id = m[e.base + P.M_ABORT_ID]
        if action_id == 0 or action_id == m[e.base + P.M_ABORT_ACK_ID]:
            return
        self._abort_cycles(e)
        m[e.base + P.M_ABORT_ACK_ID] = action_id
        log.info("sim: machine %s: cycles aborted (action %d)", e.equipment_id, action_id)

    def _fault(self, e: EquipmentRegisters, code: int = MACHINE_FAULT) -> None:
        self.mem[e.base + P.M_FAULT] = code
        self._abort_cycles(e)
        log.info("sim: machine %s faulted with %d (injected)", e.equipment_id, code)

    def machine_fault(self, equipment_id: str, code: int = MACHINE_FAULT) -> None:
        """As FAULT_STATION, in-process."""
        self.advance()
        self._fault(self.map.for_equipment(equipment_id), code)

    def emergency_stop(self) -> None:
        """Every machine and the robot fault with 8 until :meth:`clear_faults`."""
        self.advance()
        for e in self.map.equipment:
            self._fault(e, P.ERR_EMERGENCY_STOP)
        r = self.map.robot_base
        self.mem[r + P.R_FAULT] = P.ERR_EMERGENCY_STOP
        if self._robot_in_flight is not None:  # hung or not, it ends now, having moved nothing
            action_id, code, _token = self._robot_in_flight
            self.robot_hung = False
            self._robot_report(action_id, code, P.ERR_EMERGENCY_STOP)
        log.info("sim: emergency stop (injected)")

    def restart_registers(self) -> None:
        """The registers as a PLC comes back from a restart (deploy/REGISTER_MAP.md,
        "PLC restart"): handshakes, cycles and job ids gone, the pieces where they are."""
        self.advance()
        m, r = self.mem, self.map.robot_base
        for offset in (P.R_ACK_ID, P.R_STATE, P.R_DONE_ID, P.R_ERROR_CODE, P.R_FAULT):
            m[r + offset] = 0
        self._robot_in_flight, self.robot_hung = None, False  # forgotten: never reports
        for e in self.map.equipment:
            self._abort_cycles(e)
            for offset in (P.M_START_ID, P.M_ACK_ID, P.M_ERROR_CODE, P.M_RUNNING, P.M_FAULT,
                           P.M_ABORT_ID, P.M_ABORT_ACK_ID):
                m[e.base + offset] = 0
            for i in range(e.slots):
                s = e.base + 8 + 8 * i
                occupied = m[s + P.S_OCCUPIED]
                self._clear_slot(s)
                m[s + P.S_OCCUPIED] = occupied
        m[self.map.dock_base + P.D_ARRIVAL_SEQ] = 0
        self.clear_faults()
        c = self.map.sim_control_base
        if c:  # injections are gone; the scrap rate is the simulator's setting, kept
            scrap_permille = m[c + P.C_SCRAP_PERMILLE]
            m[c:c + SIM_CONTROL_BLOCK] = [0] * SIM_CONTROL_BLOCK
            m[c + P.C_SCRAP_PERMILLE] = scrap_permille
        log.info("sim: PLC restart: registers reset, pieces kept")

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
        if m[c + P.C_ESTOP]:
            m[c + P.C_ESTOP] = 0
            self.emergency_stop()
        if m[c + P.C_RESTART_MS]:
            self.restart_request_ms, m[c + P.C_RESTART_MS] = m[c + P.C_RESTART_MS], 0
        if m[c + P.C_TAKE_FROM_BUFFER]:
            b = self._buffer(m[c + P.C_TAKE_FROM_BUFFER])
            m[c + P.C_TAKE_FROM_BUFFER] = 0
            if b is not None and m[b]:
                m[b] = 0
                log.info("sim: the piece on a buffer slot taken out by hand (injected)")
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
        m[r + P.R_FAULT] = 0
        if self.robot_hung:
            self.robot_hung, self._robot_in_flight = False, None
            m[r + P.R_STATE] = P.ROBOT_IDLE  # the hung action is abandoned, never reported
        self.response_delay_ms = m[c + P.C_RESPONSE_DELAY_MS] = 0
        finishes, self._hung_finishes = self._hung_finishes, []
        for fn in finishes:
            fn()
