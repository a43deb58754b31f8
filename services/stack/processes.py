"""What ``linectl up`` runs: the processes of the stack, in start order.

Each process is a separate OS process whose command line names it
(``sim``, ``hardware``, ``line_controller``, ``gateway``, ``retention``), so
operators and tests can find it with ``ps``. ``retention`` purges what the
retention policy says is old, every ``LINECTL_RETENTION_INTERVAL_SECONDS``.

With a plant file (``LINECTL_PLANT_FILE``), each line of the plant has its own
simulator (for ``plc: sim``), hardware service and line_controller, each with
the line id on its command line (``run_service hardware --line cell-b``,
``cli sim --line cell-b``) and its line's settings in its environment
(``services.stack.plant_lines``), named ``<kind>@<lineId>``; then one gateway
and the retention job. ``lines`` narrows the lines to run (``--lines``, none
for ``--no-lines``), ``central=False`` leaves out the gateway and retention.

A line's processes get their line's database URL (its own login,
``services.stack.line_credentials``), and no other: the owner's URL is the
gateway's and retention's only. Their data directory is their line's own
(``services.stack.line_files``), not the one that holds the superuser's and
the other lines' passwords.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Collection, Mapping

from services.hardware.sim.serving import EXIT_CANNOT_LISTEN
from services.stack.line_files import line_files_env
from services.stack.plant_lines import line_env, lines_of, sim_port
from services.stack.supervisor import ProcessSpec
from shared.config import Settings
from shared.plant import Plant, PlantLine, plant_of

HARDWARE_STOP_SECONDS = 35.0

MODULES = {  # what each kind of process runs: left out while it is not built
    "sim": "services.hardware.sim",
    "hardware": "services.hardware.service",
    "line_controller": "services.line_controller.service",
    "gateway": "gateway.app",
    "retention": "shared.db.retention",
    "uns": "services.uns.publisher",
}
LINE_KINDS = ("sim", "hardware", "line_controller")


def _exists(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _spec(kind: str, argv: list[str], env: dict[str, str], name: str | None = None) -> list[ProcessSpec]:
    """The process of ``kind`` (none while its module is not built)."""
    if not _exists(MODULES[kind]):
        return []
    # The hardware's clean stop lets the robot finish its action (LINECTL_HW_STOP_GRACE, 25 s).
    grace = HARDWARE_STOP_SECONDS if kind == "hardware" else ProcessSpec.grace_seconds
    return [ProcessSpec(name=name or kind, argv=argv, env=env, grace_seconds=grace,
                        takes_hangup=kind == "gateway", independent=kind == "retention",
                        # a simulator whose port another holds stops the stack (no crash loop)
                        fatal_exits=(EXIT_CANNOT_LISTEN,) if kind == "sim" else ())]


def line_database_env(settings: Settings, url: str) -> dict[str, str | None]:
    """A line's database in its processes' environment: its URL, and the
    ``pgsql://`` transport on it (an explicit ``pgsql://`` URI would name another
    login). No libpq password variable of the supervisor's reaches them."""
    env: dict[str, str | None] = {"LINECTL_DATABASE_URL": url, "PGPASSWORD": None, "PGPASSFILE": None,
                                  "PGSERVICEFILE": None, "PGUSER": None}
    if (settings.amqp_uri or "pgsql:").startswith("pgsql:"):
        env["LINECTL_AMQP_URI"] = "pgsql://" + url.split("://", 1)[1]
    return env


def _one_line(settings: Settings, env: dict[str, str]) -> list[ProcessSpec]:
    """The line of a deployment without a plant file: today's processes."""
    py = sys.executable
    argv = {"sim": [py, "-m", "services.stack.cli", "sim"],
            "hardware": [py, "-m", "services.stack.run_service", "hardware"],
            "line_controller": [py, "-m", "services.stack.run_service", "line_controller"]}
    kinds = LINE_KINDS if settings.plc == "sim" else LINE_KINDS[1:]
    return [spec for kind in kinds for spec in _spec(kind, argv[kind], env)]


def _plant_line(settings: Settings, plant: Plant, line: PlantLine, env: dict[str, str]) -> list[ProcessSpec]:
    """One line of the plant: its simulator (for ``plc: sim``), hardware, line_controller."""
    py = sys.executable
    env = {**env, **line_env(settings, plant, line)}
    argv = {"sim": [py, "-m", "services.stack.cli", "sim", "--line", line.id,
                    "--port", str(sim_port(settings, plant, line))],
            "hardware": [py, "-m", "services.stack.run_service", "hardware", "--line", line.id],
            "line_controller": [py, "-m", "services.stack.run_service", "line_controller", "--line", line.id]}
    kinds = LINE_KINDS if line.plc == "sim" else LINE_KINDS[1:]
    return [spec for kind in kinds for spec in _spec(kind, argv[kind], env, f"{kind}@{line.id}")]


def _central(settings: Settings, env: dict[str, str]) -> list[ProcessSpec]:
    """The plant's one gateway, and the retention job when it has an interval."""
    py = sys.executable
    specs = _spec("gateway", [py, "-m", "gateway", "--name", "gateway"], env)
    if settings.retention_interval_seconds:
        specs += _spec("retention", [py, "-m", "services.stack.cli", "retention"], env)
    if settings.mqtt_enabled:  # the northbound publisher (services.uns), only with a broker named
        specs += _spec("uns", [py, "-m", "services.uns", "--name", "uns"], env)
    return specs


def stack_processes(settings: Settings, database_url: str | None, plant: Plant | None = None,
                    lines: Collection[str] | None = None, central: bool = True,
                    line_urls: Mapping[str, str] | None = None) -> list[ProcessSpec]:
    """The stack's processes; parts not built yet are left out. ``plant``: the plant
    file's (None: the one line of today's settings). ``lines``: the ids of the
    lines to run (None: every line; empty: none). ``central``: the gateway and
    retention too, on ``database_url``. ``line_urls``: each line's own URL (a
    line without one, with the roles off, gets ``database_url``)."""
    line_urls = line_urls or {}
    env = {"LINECTL_DATABASE_URL": database_url}

    def line_env_of(line_id: str) -> dict:
        url = line_urls.get(line_id)
        return {**line_files_env(settings, line_id), **(line_database_env(settings, url) if url else env)}

    specs: list[ProcessSpec] = []
    if plant is None:
        if lines is None or lines:
            line_id = next(iter(line_urls), None) or plant_of(settings).line_ids[0]  # the layout's id
            specs += _one_line(settings, line_env_of(line_id))
    else:
        for line in lines_of(plant, lines):
            specs += _plant_line(settings, plant, line, line_env_of(line.id))
    if central:
        specs += _central(settings, env)
    return specs
