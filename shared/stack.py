"""What ``linectl up`` runs: the processes of the stack, in start order.

Each process is a separate OS process whose command line names it
(``sim``, ``hardware``, ``line_controller``, ``gateway``), so operators and
tests can find it with ``ps``.
"""

from __future__ import annotations

import importlib.util
import sys

from shared.config import Settings
from shared.supervisor import ProcessSpec


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
        ("sim", "services.hardware.sim", [py, "-m", "shared.cli", "sim"]),
        ("hardware", "services.hardware.service",
         [py, "-m", "shared.run_service", "hardware"]),
        ("line_controller", "services.line_controller.service",
         [py, "-m", "shared.run_service", "line_controller"]),
        ("gateway", "gateway.app", [py, "-m", "gateway", "--name", "gateway"]),
    ]
    for name, module, argv in candidates:
        if name == "sim" and settings.plc != "sim":
            continue
        if _exists(module):
            specs.append(ProcessSpec(name=name, argv=argv, env=env))
    return specs
