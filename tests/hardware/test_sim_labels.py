"""The simulator's piece labels (what a SCAN reads, and so the pieces' serials:
PRODUCT.md, "Piece traceability") are unique across lines and runs, a seed or
not: a demo of traceability must never show two pieces under one serial."""

from __future__ import annotations

from pathlib import Path

from services.hardware import plc as P
from services.hardware.sim.model import LineModel, SimOptions
from shared.layout import load_layout

LINES = Path(__file__).resolve().parents[2] / "deploy" / "lines"


def _scan(model: LineModel, job: int) -> str:
    """A SCAN of the piece of ``job`` on buffer slot 1, as the robot's action runs it."""
    model.mem[model._buffer(1)] = 1
    assert model._scan((model.map.buffer_station, 1), (0, 0), job) == 0
    r = model.map.robot_base
    return P.decode_text(model.mem[r + P.R_TEXT_OUT:r + P.R_TEXT_OUT + P.TEXT_REGISTERS])


def test_scan_codes_are_unique_across_lines_and_runs_with_one_seed_and_stable_per_piece(layout):
    runs = [LineModel(layout, SimOptions(seed=7)) for _ in range(2)]
    lines = [LineModel(load_layout(path), SimOptions(seed=7)) for path in sorted(LINES.glob("*.yaml"))]
    codes = [_scan(model, 41) for model in runs + lines]
    assert len(set(codes)) == len(codes), codes  # job 41 of each run and of each line: another piece
    assert all(len(code) <= P.TEXT_MAX and code.isascii() and code.isalnum() for code in codes), codes
    assert _scan(runs[0], 41) == codes[0]  # the same piece scanned again reads the same label
    assert _scan(runs[0], 42) != codes[0]
