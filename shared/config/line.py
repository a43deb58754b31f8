"""The line and the process: the data directory, the line layout, logging, and
the line controller's timings (a step's timeout, an overdue cycle)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .parse import parse_choice, parse_float

LAYOUT_NAME = "line.yaml"
SHARED = Path(__file__).resolve().parent.parent  # the ``shared`` package


def default_line_file() -> Path:
    """The line layout when ``LINECTL_LINE_FILE`` is unset: ``line.yaml`` in the
    working directory, else the checkout's ``deploy/line.yaml``, else the demo
    layout the wheel ships (``shared/deploy/``, copied from ``deploy/`` at build)."""
    for candidate in (Path.cwd() / LAYOUT_NAME, SHARED.parent / "deploy" / LAYOUT_NAME,
                      SHARED / "deploy" / LAYOUT_NAME):
        if candidate.is_file():
            return candidate
    return SHARED / "deploy" / LAYOUT_NAME  # missing: the layout loader names this path


@dataclasses.dataclass(frozen=True)
class LineSettings:
    data_dir: Path = Path("var")
    line_file: Path = dataclasses.field(default_factory=default_line_file)
    # Several lines (shared.plant): unset, the plant is the one line of line_file.
    plant_file: Path | None = None
    log_level: str = "INFO"
    log_format: str = "text"
    # A robot/tool step with no result by then suspends its job for the operator.
    step_timeout_seconds: float = 150.0
    # A machine cycle running longer than this many times its cycleSeconds is
    # overdue: an alarm and the operator's question (CYCLE_OVERDUE); never moved by itself.
    cycle_overdue_factor: float = 3.0


PARSERS = {
    "DATA_DIR": ("data_dir", lambda n, r: Path(r).expanduser()),
    "STEP_TIMEOUT_SECONDS": ("step_timeout_seconds", lambda n, r: parse_float(n, r, 1.0, 86400.0)),
    "CYCLE_OVERDUE_FACTOR": ("cycle_overdue_factor", lambda n, r: parse_float(n, r, 0.01, 1000.0)),
    "LINE_FILE": ("line_file", lambda n, r: Path(r).expanduser()),
    "PLANT_FILE": ("plant_file", lambda n, r: Path(r).expanduser()),
    "LOG_LEVEL": ("log_level", lambda n, r: parse_choice(n, r, ("DEBUG", "INFO", "WARNING", "ERROR"))),
    "LOG_FORMAT": ("log_format", lambda n, r: parse_choice(n, r, ("text", "json"))),
}
