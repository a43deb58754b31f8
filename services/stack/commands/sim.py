"""``linectl sim``: the line simulator in the foreground, Modbus TCP
(deploy/REGISTER_MAP.md) or, with ``--protocol opcua`` /
LINECTL_SIM_PROTOCOL=opcua, OPC UA (deploy/OPCUA_MAP.md).

``--line ID``: the simulator of the plant's line ID (``LINECTL_PLANT_FILE``): its
layout, its ``simProtocol``, and its port, ``LINECTL_SIM_PORT`` plus the line's
place in the plant file (``services.stack.plant_lines.sim_port``), the port
``linectl up`` gives that line's hardware service. ``--port`` and ``--protocol``
still win.

A port it cannot listen on (another simulator, another stack) is one line on
stderr and exit status ``EXIT_CANNOT_LISTEN`` (69), no traceback: ``linectl up``
stops on it rather than restart it while its line's hardware might reach
another stack's simulator there."""

from __future__ import annotations

import sys
import warnings

# The register map's module loads eventlet (the device port), which warns on import
# that it is in bugfix mode: noise on the simulator's console (as run_service says).
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

from services.hardware.sim.model import SimOptions  # noqa: E402
from services.hardware.sim.serving import EXIT_CANNOT_LISTEN, cannot_listen  # noqa: E402
from services.stack.plant_lines import sim_port  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.layout import LayoutError, load_layout  # noqa: E402
from shared.plant import PlantError, plant_of  # noqa: E402


def _opcua_simulator(settings: Settings, layout, options: SimOptions, port: int):
    """The OPC UA server, or None once the error is printed. asyncua is imported
    only by a simulator that speaks it."""
    from services.hardware.sim.opcua_server import OpcUaLineSimulator

    # The simulator serves without security unless configured (the loopback default);
    # secured: Basic256Sha256 SignAndEncrypt, LINECTL_OPCUA_USER / _PASSWORD.
    security = settings.opcua_security or "none"
    if security != "none" and not (settings.opcua_user and settings.opcua_password):
        print("linectl sim: LINECTL_OPCUA_SECURITY=sign-and-encrypt needs LINECTL_OPCUA_USER and "
              "LINECTL_OPCUA_PASSWORD", file=sys.stderr)
        return None
    sim = OpcUaLineSimulator(layout, options, settings.sim_host, port, security=security,
                             user=settings.opcua_user, password=settings.opcua_password,
                             cert_dir=settings.opcua_cert_directory)
    print(f"linectl sim: OPC UA on {sim.address}, security {security}, "
          f"speed {options.speed:g}x, scrap rate {options.scrap_rate:g}", flush=True)
    return sim


def _modbus_simulator(settings: Settings, layout, options: SimOptions, port: int):
    from services.hardware.sim.server import LineSimulator

    sim = LineSimulator(layout, options, settings.sim_host, port)
    print(f"linectl sim: Modbus TCP on {sim.address}, unit {layout.plc.unit_id}, "
          f"speed {options.speed:g}x, scrap rate {options.scrap_rate:g}", flush=True)
    return sim


def _line(settings: Settings, args):
    """The layout, its file, the port and the protocol: ``--line``'s, else the settings'."""
    line_id = getattr(args, "line", None)
    if line_id is None:
        layout = load_layout(settings.line_file)
        return layout, settings.line_file, args.port or settings.sim_port, args.protocol or settings.sim_protocol
    plant = plant_of(settings)
    try:
        line = plant.line(line_id)
    except KeyError:
        raise PlantError(f"--line {line_id}: the plant has no such line (its lines: "
                         f"{', '.join(plant.line_ids)})") from None
    return (line.layout, line.layout_file, args.port or sim_port(settings, plant, line),
            args.protocol or line.sim_protocol)


def run(settings: Settings, args) -> int:
    try:
        layout, layout_file, port, protocol = _line(settings, args)
    except LayoutError as exc:
        print(f"linectl sim: bad layout: {exc}", file=sys.stderr)
        return 2
    if layout.plc is None:
        print(f"linectl sim: {layout_file} has no plc: register map", file=sys.stderr)
        return 2
    options = SimOptions(speed=settings.sim_speed, scrap_rate=args.scrap_rate, seed=args.seed,
                         pallet_size=args.pallet_size, pallet_seconds=args.pallet_seconds)
    if not _port_free(settings.sim_host, port):
        return EXIT_CANNOT_LISTEN
    if protocol == "opcua":
        sim = _opcua_simulator(settings, layout, options, port)
    else:
        sim = _modbus_simulator(settings, layout, options, port)
    if sim is None:
        return 2
    try:
        sim.serve()
    except (OSError, RuntimeError):  # pymodbus says only RuntimeError("Could not start listen")
        if _port_free(settings.sim_host, port):
            raise  # something else
        return EXIT_CANNOT_LISTEN  # taken between the look and the listen
    return 0


def _port_free(host: str, port: int) -> bool:
    """Whether the simulator may listen on ``host:port``; if not, one line says so
    (``linectl up`` stops on the exit status that follows, EXIT_CANNOT_LISTEN)."""
    why = cannot_listen(host, port)
    if why is not None:
        print(f"linectl sim: cannot listen on {host}:{port} ({why}): another simulator or stack holds the "
              "port; stop it, or choose another (LINECTL_SIM_PORT, --port)", file=sys.stderr, flush=True)
    return why is None
