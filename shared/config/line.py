"""The line and the process: the data directory, the line layout, logging, and
the line controller's timings (a step's timeout, an overdue cycle)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .parse import choice, expanded_path, floats, setting

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
    data_dir: Path = setting(Path("var"), expanded_path)
    line_file: Path = setting(parse=expanded_path, default_factory=default_line_file)
    # Several lines (shared.plant): unset, the plant is the one line of line_file.
    plant_file: Path | None = setting(None, expanded_path)
    log_level: str = setting("INFO", choice(("DEBUG", "INFO", "WARNING", "ERROR")))
    log_format: str = setting("text", choice(("text", "json")))
    # A robot/tool step with no result by then suspends its job for the operator.
    step_timeout_seconds: float = setting(150.0, floats(1.0, 86400.0))
    # A machine cycle running longer than this many times its cycleSeconds is
    # overdue: an alarm and the operator's question (CYCLE_OVERDUE); never moved by itself.
    cycle_overdue_factor: float = setting(3.0, floats(0.01, 1000.0))
