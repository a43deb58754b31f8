"""What ``linectl up`` runs: the processes of the stack, in start order.

Each process is a separate OS process whose command line names it
(``sim``, ``hardware``, ``line_controller``, ``gateway``, ``retention``), so
operators and tests can find it with ``ps``. ``retention`` purges what the
retention policy says is old, every ``LINECTL_RETENTION_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import threading
import time
import urllib.error
import urllib.request

from shared.config import Settings
from shared.supervisor import ProcessSpec

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
        ("sim", "services.hardware.sim", [py, "-m", "shared.cli", "sim"]),
        ("hardware", "services.hardware.service",
         [py, "-m", "shared.run_service", "hardware"]),
        ("line_controller", "services.line_controller.service",
         [py, "-m", "shared.run_service", "line_controller"]),
        ("gateway", "gateway.app", [py, "-m", "gateway", "--name", "gateway"]),
    ]
    if settings.retention_interval_seconds:
        candidates.append(("retention", "shared.db.retention", [py, "-m", "shared.cli", "retention"]))
    for name, module, argv in candidates:
        if name == "sim" and settings.plc != "sim":
            continue
        if _exists(module):
            # The hardware's clean stop lets the robot finish its action (LINECTL_HW_STOP_GRACE, 25 s).
            grace = HARDWARE_STOP_SECONDS if name == "hardware" else ProcessSpec.grace_seconds
            specs.append(ProcessSpec(name=name, argv=argv, env=env, grace_seconds=grace))
    return specs


def readiness(url: str, timeout: float = 3.0) -> tuple[bool, str]:
    """``GET url`` (the gateway's ``/readyz``): ready, or why not."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200, ""
    except urllib.error.HTTPError as exc:
        try:
            return False, json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            return False, f"HTTP {exc.code}"
    except OSError as exc:
        return False, f"gateway not answering ({exc.__class__.__name__})"


class ReadinessWatch:
    """Polls ``/readyz`` in a thread and says so when the stack becomes ready,
    stops being ready (naming what is down) and is ready again; ``on_ready``
    is called each time it becomes ready."""

    def __init__(self, url: str, say, stopping, interval: float = 0.5, on_ready=None):
        self.url = url
        self.say = say
        self.stopping = stopping  # callable: true once the supervisor is stopping
        self.interval = interval
        self.on_ready = on_ready
        self.ready_once = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="readiness", daemon=True).start()

    def _run(self) -> None:
        ready, reason = False, None
        while not self.stopping():
            now_ready, why = readiness(self.url)
            if now_ready and not ready:
                self.say("ready" if not self.ready_once.is_set() else "ready again")
                self.ready_once.set()
                if self.on_ready is not None:
                    self.on_ready()
            elif not now_ready and (ready or (self.ready_once.is_set() and why != reason)):
                self.say(f"not ready: {why}")
            ready, reason = now_ready, why
            time.sleep(self.interval if not ready else self.interval * 4)
