"""``linectl up``: the embedded PostgreSQL (unless a URL is set), migrations, then
every process of the stack under one supervisor, with a start-up summary."""

from __future__ import annotations

import sys
import threading

from services.identity import bootstrap
from services.stack.commands.database import database_url, stop_if_started
from services.stack.migrate import upgrade
from services.stack.processes import stack_processes
from services.stack.readiness import ReadinessWatch
from services.stack.supervisor import Supervisor
from shared.config import Settings, check_bind, ensure_tokens, mask_url


def _print_summary(settings: Settings, url: str, server, specs, page: str) -> None:
    print("linectl is up")
    print(f"database: {mask_url(url)}" + (f" (embedded, data in {server.requested},"
                                         f" password in {server.password_file})" if server else ""))
    print(f"page: {page}")
    print(f"layout: {settings.line_file}")
    print(f"data directory: {settings.data_dir.resolve()}")
    print("processes: " + (", ".join(s.name for s in specs) or "(none built yet)"))
    if settings.tokens_generated:
        print(f"tokens (generated once, kept in {settings.data_dir / 'tokens'}):")
        for token, holder in settings.tokens.items():
            print(f"  {holder.role}: {token}")
    sys.stdout.flush()


def run(settings: Settings, args) -> int:
    check_bind(settings)  # before anything starts: no plain HTTP on a non-loopback address
    url, server = database_url(settings)
    upgrade(url)
    admin_password = bootstrap.initial_admin_at(url, settings)
    settings = ensure_tokens(settings)
    specs = stack_processes(settings, url)
    page = f"{'https' if settings.tls else 'http'}://{settings.http_host}:{settings.http_port}/"

    def say(line):
        print(f"linectl: {line}" + (f" ({page})" if line.startswith("ready") else ""), flush=True)

    def started(sup):
        if any(s.name == "gateway" for s in specs):
            # "ready" once /readyz answers 200: database, loop, hardware and PLC all up.
            ReadinessWatch(page + "readyz", say, sup.stopping, on_ready=sup.mark_healthy).start()
        _print_summary(settings, url, server, specs, page)
        bootstrap.announce(admin_password, settings)

    def stopping():
        if server is not None:  # its shutdown checkpoint's work begins beside the processes' stops
            threading.Thread(target=server.checkpoint, name="checkpoint", daemon=True).start()

    try:
        Supervisor(specs).run(on_started=started, on_stopping=stopping)
    finally:
        stop_if_started(server)
    return 0
