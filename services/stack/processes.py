"""What ``linectl up`` runs: the processes of the stack, in start order.

Each process is a separate OS process whose command line names it
(``sim``, ``hardware``, ``line_controller``, ``gateway``, ``retention``), so
operators and tests can find it with ``ps``. ``retention`` purges what the
retention policy says is old, every ``LINECTL_RETENTION_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import importlib.util
import sys

from services.stack.supervisor import ProcessSpec
from shared.config import Settings

HARDWARE_STOP_SECONDS = 35.0


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def stack_processes(settings: Settings, database_url: str) -> list[ProcessSpec]:
    """The stack's processes; parts not built yet are left out."""
    py = sys.executable
    env = {"LINECTL_DATABASE_URL": database_url}
    specs = []
    candidates = [
        ("sim", "services.hardware.sim", [py, "-m", "services.stack.cli", "sim"]),
        ("hardware", "services.hardware.service",
         [py, "-m", "services.stack.run_service", "hardware"]),
        ("line_controller", "services.line_controller.service",
         [py, "-m", "services.stack.run_service", "line_controller"]),
        ("gateway", "gateway.app", [py, "-m", "gateway", "--name", "gateway"]),
    ]
    if settings.retention_interval_seconds:
        candidates.append(("retention", "shared.db.retention", [py, "-m", "services.stack.cli", "retention"]))
    for name, module, argv in candidates:
        if name == "sim" and settings.plc != "sim":
            continue
        if _exists(module):
            # The hardware's clean stop lets the robot finish its action (LINECTL_HW_STOP_GRACE, 25 s).
            grace = HARDWARE_STOP_SECONDS if name == "hardware" else ProcessSpec.grace_seconds
            specs.append(ProcessSpec(name=name, argv=argv, env=env, grace_seconds=grace,
                                     takes_hangup=name == "gateway", independent=name == "retention"))
    return specs
