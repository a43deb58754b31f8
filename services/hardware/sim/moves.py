"""What each robot command does to the cell once the robot gets there: its
checks first (a refused move moves nothing), then the pieces move between dock,
buffer and machine slots, or a tool step scans or marks a piece."""

from __future__ import annotations

from services.hardware import plc as P
from services.hardware.sim.cell import CellBase


class CellMoves(CellBase):
    def _moves_state(self) -> None:
        self.marks: list[tuple[int, str]] = []  # (buffer slot, text), for the log and tests

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
        # The piece's label: the same piece (job) reads the same code every time.
        serial = job if job else self.rng.randrange(10**7, 10**8)
        self.mem[r + P.R_TEXT_OUT:r + P.R_TEXT_OUT + P.TEXT_REGISTERS] = P.encode_text(
            f"{self.label_prefix}{serial:08d}")
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
