"""``linectl up``: the embedded PostgreSQL (unless a URL is set), migrations, then
every process of the stack under one supervisor, with a start-up summary.

With a plant file: every line's processes, then one gateway and retention;
``--lines ID[,ID…]`` only those lines' processes (a line host), ``--no-lines``
only the gateway and retention. The migrate step registers every line of the
plant (its schema and role) before any line's service starts, and sets the login
of each line run here (``services.stack.line_credentials``): a line's processes
get that line's URL only. A line host given its lines' own URLs (``--lines``,
with ``LINECTL_DATABASE_URL`` a line's, or the plant file's secrets file)
migrates nothing and starts no database. A bad plant file or an unknown line
stops start-up before anything starts (exit status 2)."""

from __future__ import annotations

import sys
import threading

from services.identity import bootstrap
from services.stack.commands.database import database_url, stop_if_started
from services.stack.line_credentials import check_migrated, ensure_logins, given_logins
from services.stack.line_files import make_line_data_dirs
from services.stack.migrate import current_heads, register_plant, upgrade
from services.stack.plant_lines import check_sim_ports, plant_here
from services.stack.processes import stack_processes
from services.stack.readiness import ReadinessWatch
from services.stack.supervisor import Supervisor
from shared.config import Settings, check_bind, ensure_tokens, mask_url
from shared.plant import Plant, plant_of


def _print_lines(settings: Settings, plant: Plant | None, lines) -> None:
    if plant is None:
        print(f"layout: {settings.line_file}")
        return
    print(f"plant: {settings.plant_file} ({plant.id}: {', '.join(plant.line_ids)})")
    print("lines here: " + (", ".join(plant.line_ids if lines is None else lines) or "(none)"))


def _print_summary(settings: Settings, url: str, server, specs, page: str, plant=None, lines=None) -> None:
    print("linectl is up")
    print(f"database: {mask_url(url)}" + (f" (embedded, data in {server.requested},"
                                         f" password in {server.password_file})" if server else "")
          if url else "database: each line's own login (nothing migrated here)")
    print(f"page: {page}")
    _print_lines(settings, plant, lines)
    print(f"data directory: {settings.data_dir.resolve()}")
    print("processes: " + (", ".join(s.name for s in specs) or "(none built yet)"))
    if settings.tokens_generated:
        print(f"tokens (generated once, kept in {settings.data_dir / 'tokens'}):")
        for token, holder in settings.tokens.items():
            print(f"  {holder.role}: {token}")
    sys.stdout.flush()


def run(settings: Settings, args) -> int:
    # A line host (--lines) runs no gateway: no HTTP to bind, no tokens, no first admin.
    central = not getattr(args, "lines", None)
    if central:
        check_bind(settings)  # before anything starts: no plain HTTP on a non-loopback address
    plant, lines = plant_here(settings, getattr(args, "lines", None), getattr(args, "no_lines", False))
    check_sim_ports(settings, plant, lines)  # before the database starts: a taken port is one line
    line_plant = plant or plant_of(settings)  # the one line of a deployment without a plant file
    here = line_plant.line_ids if lines is None else lines
    line_urls = None if central else given_logins(settings, plant, here)
    if line_urls is not None:  # a line host with its lines' own logins: nothing to migrate here
        url, server = None, None
        check_migrated(line_urls, current_heads())
    else:
        url, server = database_url(settings)
        upgrade(url)
        register_plant(url, line_plant)  # every line's schema and role, before its services start
        line_urls = ensure_logins(url, settings, line_plant, here) if settings.db_roles else {}
    make_line_data_dirs(settings, here)  # each line's processes' own data directory
    admin_password = bootstrap.initial_admin_at(url, settings) if central else None
    settings = ensure_tokens(settings) if central else settings
    specs = stack_processes(settings, url, plant, lines, central=central, line_urls=line_urls)
    page = f"{'https' if settings.tls else 'http'}://{settings.http_host}:{settings.http_port}/"

    def say(line):
        print(f"linectl: {line}" + (f" ({page})" if line.startswith("ready") else ""), flush=True)

    def started(sup):
        if any(s.name == "gateway" for s in specs):
            # "ready" once /readyz answers 200: database, loop, hardware and PLC all up.
            ReadinessWatch(page + "readyz", say, sup.stopping, on_ready=sup.mark_healthy).start()
        _print_summary(settings, url, server, specs, page, plant, lines)
        bootstrap.announce(admin_password, settings)

    def stopping():
        if server is not None:  # its shutdown checkpoint's work begins beside the processes' stops
            threading.Thread(target=server.checkpoint, name="checkpoint", daemon=True).start()

    try:
        Supervisor(specs).run(on_started=started, on_stopping=stopping)
    finally:
        stop_if_started(server)
    return 0
