"""The simulated machines' cycles (deploy/REGISTER_MAP.md, "Machine block"): a
START_ID starts the flagged (or every loaded) slots, a single machine one slot
after another, a batch machine all at once; a cycle's end sets DONE (and an
inspection's RESULT); ABORT_ID, a fault or a restart stops cycles where they are."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

from services.hardware import plc as P
from services.hardware.sim.cell import CellBase
from shared.layout import EquipmentRegisters, EquipmentSpec

log = logging.getLogger(__name__)


class MachineCycles(CellBase):
    def _machine_state(self) -> None:
        self.machine_free_at: dict[str, float] = {e.equipment_id: 0.0 for e in self.map.equipment}
        # slot address -> its running cycle's cycle_log entry; a timer of an aborted cycle finds
        # another entry (or none) and does nothing, also when the slot was started again since
        self._running_cycles: dict[int, list] = {}
        # [equipment id, slot no, simulated start, simulated end or None, "done"/"aborted"/None],
        # the latest cycles (for tests; bounded for a long `linectl sim`)
        self.cycle_log: deque[list] = deque(maxlen=1000)
        self.hung_stations: set[int] = set()
        self._hung_finishes: list[Callable[[], None]] = []

    def _machine_start(self, e: EquipmentRegisters) -> None:
        m = self.mem
        action_id = m[e.base + P.M_START_ID]
        if action_id == 0 or action_id == m[e.base + P.M_ACK_ID]:
            return
        slots = self._slots(e)
        flagged = [s for s in slots if m[s + P.S_START]]
        for s in slots:
            m[s + P.S_START] = 0
        spec = self.layout.equipment_by_id(e.equipment_id)
        to_start = flagged or [s for s in slots if m[s + P.S_OCCUPIED] and not m[s + P.S_DONE]
                               and not m[s + P.S_RUNNING]]
        error = self._start_error(e, spec, to_start)
        m[e.base + P.M_ERROR_CODE] = error
        m[e.base + P.M_ACK_ID] = action_id
        if not error:
            self._begin_cycles(e, spec, to_start)

    def _start_error(self, e: EquipmentRegisters, spec: EquipmentSpec, to_start: list[int]) -> int:
        """The PLC error a start of these slots gets (0: it starts)."""
        m = self.mem
        if m[e.base + P.M_FAULT]:
            return m[e.base + P.M_FAULT]
        if spec.batch and m[e.base + P.M_RUNNING]:
            return 5
        if not to_start:
            return 7
        if any(not m[s + P.S_OCCUPIED] for s in to_start):
            return 1
        if any(m[s + P.S_RUNNING] for s in to_start):
            return 5
        return 0

    def _begin_cycles(self, e: EquipmentRegisters, spec: EquipmentSpec, to_start: list[int]) -> None:
        m = self.mem
        start = max(self.now(), self.machine_free_at[e.equipment_id])
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
        running = any(self.mem[s + P.S_RUNNING] for s in self._slots(e))
        self.mem[e.base + P.M_RUNNING] = int(running)
        if not running:
            self.machine_free_at[e.equipment_id] = 0.0

    def _abort_cycles(self, e: EquipmentRegisters) -> None:
        """Every running cycle of the machine stops: RUNNING falls, DONE stays 0, the
        pieces stay in their slots (OCCUPIED, JOB_ID kept)."""
        for s in self._slots(e):
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
