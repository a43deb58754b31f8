"""The simulated cell's ground floor: its register image, its simulated clock
and where each place of the cell sits in the image (deploy/REGISTER_MAP.md).

Every concern of the model (robot, moves, machines, faults) builds on
:class:`CellBase`; :class:`~services.hardware.sim.model.LineModel` puts them
together. Time is simulated (wall clock × speed) and advanced lazily, when a
request comes, so the model needs no thread of its own.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import itertools
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from services.hardware import plc as P
from shared.layout import (
    DOCK_BLOCK,
    IDENTITY_BLOCK,
    ROBOT_BLOCK,
    SIM_CONTROL_BLOCK,
    EquipmentRegisters,
    Layout,
)

log = logging.getLogger(__name__)


@dataclass
class SimOptions:
    speed: float = 1.0
    scrap_rate: float = 0.05     # inspection fail probability
    seed: int | None = None      # fixes inspection outcomes and barcodes
    pallet_size: int = 4         # pieces per pallet at the dock
    pallet_seconds: float = 30.0  # simulated delay before the next pallet once the dock is empty


class CellBase:
    def __init__(self, layout: Layout, options: SimOptions, clock: Callable[[], float] = time.monotonic):
        if layout.plc is None:
            raise ValueError("the layout has no plc: register map")
        self.layout = layout
        self.map = layout.plc
        self.options = options
        self.clock = clock
        self.t0 = clock()
        self.rng = random.Random(options.seed)
        ends = [self.map.identity_base + IDENTITY_BLOCK, self.map.robot_base + ROBOT_BLOCK,
                self.map.dock_base + DOCK_BLOCK,
                self.map.buffer_base + layout.buffer_slots, self.map.sim_control_base + SIM_CONTROL_BLOCK]
        ends += [e.base + e.size for e in self.map.equipment]
        self.mem = [0] * max(ends)
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self.identity = ""
        self.serve_identity(self.map.identity or layout.id)  # the layout's plc.identity, else the line's id
        # The labels this run's pieces carry (what a SCAN reads): unique across lines and
        # runs, seed or not (a seed fixes outcomes, never two pieces' serials to one code).
        digest = hashlib.sha256(self.identity.encode() + os.urandom(16)).digest()
        self.label_prefix = "SN" + base64.b32encode(digest).decode()[:8]

    # -- identity ----------------------------------------------------------------

    def serve_identity(self, identity: str) -> None:
        """Publish ``identity`` in the identity block (deploy/REGISTER_MAP.md); the
        OPC UA server shows the same as ``Cell/Identity``."""
        self.identity = identity
        self._write_identity()

    def _write_identity(self) -> None:
        """The identity block as the PLC holds it (read-only: a host's write to it
        is answered, and changes nothing)."""
        b = self.map.identity_base
        self.mem[b:b + IDENTITY_BLOCK] = [0] * IDENTITY_BLOCK
        self.mem[b + P.I_MAP_VERSION] = P.MAP_VERSION
        text = P.encode_text(self.identity)
        self.mem[b + P.I_IDENTITY:b + P.I_IDENTITY + P.IDENTITY_REGISTERS] = text

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

    def _u32(self, address: int) -> int:
        return P.join_u32(self.mem[address], self.mem[address + 1])

    def _set_u32(self, address: int, value: int) -> None:
        self.mem[address:address + 2] = P.split_u32(value)

    # -- places ----------------------------------------------------------------

    def _pallet_arrives(self) -> None:
        d = self.map.dock_base
        self.mem[d + P.D_PIECES] += self.options.pallet_size
        self.mem[d + P.D_ARRIVAL_SEQ] = (self.mem[d + P.D_ARRIVAL_SEQ] + 1) & 0xFFFF
        log.info("sim: pallet of %d arrived at the dock", self.options.pallet_size)

    def _buffer(self, slot: int) -> int | None:
        """A buffer slot's register, or None for a slot the buffer has not."""
        if 1 <= slot <= self.layout.buffer_slots:
            return self.map.buffer_base + slot - 1
        return None

    def _machine_slot(self, station: int, slot: int) -> tuple[EquipmentRegisters, int] | None:
        """A machine slot's block (machine, first register), or None for no such slot."""
        e = self.map.by_station(station)
        if e is None or not 1 <= slot <= e.slots:
            return None
        return e, self._slot_base(e, slot)

    @staticmethod
    def _slot_base(e: EquipmentRegisters, slot_no: int) -> int:
        return e.base + 8 + 8 * (slot_no - 1)

    def _slots(self, e: EquipmentRegisters) -> list[int]:
        """Every slot block's first register, slot 1 first."""
        return [self._slot_base(e, n) for n in range(1, e.slots + 1)]

    @staticmethod
    def _slot_no(e: EquipmentRegisters, s: int) -> int:
        return (s - e.base - 8) // 8 + 1
