"""Which of the plant's lines a host runs, and what each line's processes are
handed (PRODUCT.md, "Plant (several lines)"; docs/operations.md, "Running a
plant").

``linectl up`` runs every line of the plant file, ``--lines ID[,ID…]`` only
those (a line host), ``--no-lines`` none (the gateway's host). A line's
processes get its layout, its PLC and its simulator's protocol and port in their
environment, as a one-line deployment's get them from ``LINECTL_*``: nothing
inside a line reads the plant file to find its own settings.

A line's simulator listens on ``LINECTL_SIM_PORT`` plus the line's place in
the plant file (the first line on ``LINECTL_SIM_PORT`` itself), whichever host
runs it and whichever lines run beside it: ``linectl sim --line ID`` and
``linectl up --lines ID`` agree without being told."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from services.hardware.sim.serving import cannot_listen
from services.stack.supervisor import CannotRun
from shared.config import Settings
from shared.plant import Plant, PlantError, PlantLine, plant_of

MAX_PORT = 65535


def plant_here(settings: Settings, lines: str | None = None, no_lines: bool = False
               ) -> tuple[Plant | None, tuple[str, ...] | None]:
    """The plant (None without a plant file and without ``--lines``: a one-line
    deployment as before) and the ids of the lines this host runs (None: all of
    them). :class:`PlantError` names a bad plant file or an unknown line."""
    if no_lines:
        return (plant_of(settings) if settings.plant_file else None), ()
    if lines is None:
        return (plant_of(settings) if settings.plant_file else None), None
    plant = plant_of(settings)
    return (plant if settings.plant_file else None), select_lines(plant, lines)


def select_lines(plant: Plant, lines: str) -> tuple[str, ...]:
    """The ids of ``--lines ID[,ID…]``, in the plant's order; each must be a line of the plant."""
    wanted = [part.strip() for part in lines.split(",") if part.strip()]
    if not wanted:
        raise PlantError("--lines: expected ID[,ID…], the ids of lines of the plant")
    for line_id in wanted:
        if line_id not in plant.line_ids:
            raise PlantError(f"--lines {line_id}: the plant has no such line "
                             f"(its lines: {', '.join(plant.line_ids)})")
    return tuple(line_id for line_id in plant.line_ids if line_id in wanted)


def sim_port(settings: Settings, plant: Plant, line: PlantLine) -> int:
    """Where ``line``'s simulator listens: ``LINECTL_SIM_PORT`` + its place in the plant."""
    port = settings.sim_port + plant.line_ids.index(line.id)
    if port > MAX_PORT:
        raise PlantError(f"line {line.id}: its simulator's port {port} (LINECTL_SIM_PORT "
                         f"{settings.sim_port} + its place in the plant) is above {MAX_PORT}")
    return port


def line_env(settings: Settings, plant: Plant, line: PlantLine) -> dict[str, str]:
    """What a line's processes (simulator, hardware, line_controller) are handed."""
    env = {
        "LINECTL_LINE_FILE": str(Path(line.layout_file).resolve()),
        "LINECTL_PLC": line.plc,
        "LINECTL_SIM_PROTOCOL": line.sim_protocol,
        "LINECTL_SIM_PORT": str(sim_port(settings, plant, line)),
    }
    if settings.plant_file:
        env["LINECTL_PLANT_FILE"] = str(Path(settings.plant_file).resolve())
    return env


def check_sim_ports(settings: Settings, plant: Plant | None, line_ids: Iterable[str] | None) -> None:
    """Before anything starts: every simulator ``linectl up`` would run here can
    listen on its port. A port another holds (another stack's simulator, most
    likely) is :class:`~services.stack.supervisor.CannotRun`, one line naming it:
    the line's hardware would otherwise serve the line from whatever answers there."""
    if plant is None:
        wanted = [("", settings.sim_port)] if settings.plc == "sim" and line_ids != () else []
    else:
        wanted = [(f" of line {line.id}", sim_port(settings, plant, line))
                  for line in lines_of(plant, line_ids) if line.plc == "sim"]
    for whose, port in wanted:
        why = cannot_listen(settings.sim_host, port)
        if why is not None:
            raise CannotRun(f"the simulator{whose} cannot listen on {settings.sim_host}:{port} ({why}): another "
                            "simulator or stack holds the port; stop it, or set LINECTL_SIM_PORT")


def lines_of(plant: Plant, line_ids: Iterable[str] | None) -> tuple[PlantLine, ...]:
    """The plant's lines among ``line_ids`` (every line for None), in the plant's order."""
    if line_ids is None:
        return plant.lines
    wanted = set(line_ids)
    return tuple(line for line in plant.lines if line.id in wanted)
