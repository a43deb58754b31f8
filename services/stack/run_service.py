"""Run one of the project's nameko services with config from linectl's settings.

    python -m services.stack.run_service line_controller [--line ID]
    python -m services.stack.run_service hardware [--line ID]

``--line``: one line of the plant file (``LINECTL_PLANT_FILE``); its layout must
be ``LINECTL_LINE_FILE``'s (``linectl up`` sets both). The default line's
services keep their plain names; another line's are ``<service>@<lineId>``
(``shared.events.LineServices``).

(`nameko run --config deploy/nameko.yaml services.<name>.service` works too;
this form needs no YAML because the config comes from ``shared.config``.)
"""

import warnings

# eventlet warns on import that it is in bugfix mode; nameko 2.14 has no other
# concurrency, so the warning is noise in every service's log.
warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

import eventlet  # noqa: E402

eventlet.monkey_patch()

import importlib  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402

from eventlet.hubs import trampoline  # noqa: E402
from nameko.runners import ServiceRunner  # noqa: E402

from shared.config import SettingsError, load_settings, nameko_config  # noqa: E402
from shared.events import LineServices  # noqa: E402
from shared.layout import load_layout  # noqa: E402
from shared.logs import configure_logging  # noqa: E402
from shared.plant import PlantError, plant_of  # noqa: E402
from shared.transport.pgsql import process_stopping  # noqa: E402

SERVICES = {  # the factory of each service's class, given its line's names
    "line_controller": "services.line_controller.service:line_controller_service",
    "hardware": "services.hardware.service:hardware_service",
}


def _wake_the_hub_on_signals() -> None:
    """A signal's Python handler runs while eventlet's hub sleeps in epoll, which
    then sleeps on to its next timer (a second or more), and what the handler set
    in motion waits for that. The signal also writes to this pipe, which the hub
    watches: it wakes at once."""
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd)

    def drain_the_pipe():
        while True:
            trampoline(read_fd, read=True)
            os.read(read_fd, 512)

    eventlet.spawn(drain_the_pipe)


def line_services(settings, line_id: str | None) -> LineServices:
    """The names of ``line_id``'s services (the default line's without one)."""
    if line_id is None:
        return LineServices()
    plant = plant_of(settings)
    try:
        line = plant.line(line_id)
    except KeyError:
        raise PlantError(f"--line {line_id}: the plant has no such line ({', '.join(plant.line_ids)})") from None
    layout_id = load_layout(settings.line_file).id
    if layout_id != line_id:
        raise PlantError(f"--line {line_id}: LINECTL_LINE_FILE {settings.line_file} is line {layout_id!r}")
    return LineServices.of_line(line.id, default=line is plant.default_line)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    line_id = argv[2] if len(argv) == 3 and argv[1] == "--line" else None
    if len(argv) not in (1, 3) or argv[0] not in SERVICES or (len(argv) == 3 and line_id is None):
        print(f"usage: python -m services.stack.run_service {{{'|'.join(SERVICES)}}} [--line ID]",
              file=sys.stderr)
        return 2
    try:
        settings = load_settings()
        config = nameko_config(settings)
        line = line_services(settings, line_id)
    except (SettingsError, PlantError) as exc:
        print(f"{argv[0]}: bad setting: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format, argv[0])
    module, _, factory = SERVICES[argv[0]].partition(":")
    service_cls = getattr(importlib.import_module(module), factory)(line)

    runner = ServiceRunner(config)
    runner.add_service(service_cls)
    stopping = eventlet.Event()

    def _stop(*_):
        if not stopping.ready():
            process_stopping()  # nameko's consumers see their cancels at once, not after a drain timeout
            stopping.send(True)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    _wake_the_hub_on_signals()
    runner.start()
    stopping.wait()
    runner.stop()  # graceful: in-flight workers finish, consumers are cancelled
    return 0


def run(argv=None) -> None:
    """``main``, then the process ends at once: everything it opened is closed by
    now (the runner's stop closed its connections and disposed its engines), and
    the interpreter's own teardown (a collection over every object of nameko,
    kombu, SQLAlchemy, eventlet) took a few hundred milliseconds of a clean stop."""
    code = main(argv)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
