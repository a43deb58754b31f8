"""The ``linectl`` command.

    linectl up        the whole stack in the foreground
    linectl migrate   Alembic upgrade to head
    linectl sim       the Modbus TCP line simulator alone
    linectl shell     nameko shell with the project's config
    linectl runtime   the reference AI Runtime worker

A bad setting stops any sub-command with one line naming it (exit status 2).
"""

from __future__ import annotations

import argparse
import logging
import sys

from shared.config import Settings, SettingsError, load_settings

log = logging.getLogger("linectl")


def database_url(settings: Settings, *, start_embedded: bool = True) -> tuple[str, object | None]:
    """The database to use, and the embedded server we started (or reused) for it."""
    if settings.database_url:
        return settings.database_url, None
    if not start_embedded:
        raise SettingsError("LINECTL_DATABASE_URL: not set, and no embedded server may be started here")
    from shared.db.embedded import EmbeddedPostgres

    server = EmbeddedPostgres(settings.data_dir / "pg", port=settings.embedded_pg_port)
    return server.start(), server


def cmd_migrate(settings: Settings, args) -> int:
    from shared.db.migrate import upgrade

    url, _server = database_url(settings)
    upgrade(url, args.revision)
    print(f"database: {url} migrated to {args.revision}")
    return 0


def cmd_up(settings: Settings, args) -> int:
    """Embedded PostgreSQL (unless a URL is set), migrations, then every process."""
    from shared.config import ensure_tokens
    from shared.db.migrate import upgrade
    from shared.stack import stack_processes
    from shared.supervisor import Supervisor

    url, server = database_url(settings)
    upgrade(url)
    settings = ensure_tokens(settings)
    specs = stack_processes(settings, url)

    def summary(_sup):
        print("linectl is up")
        print(f"database: {url}" + (f" (embedded, data in {server.pgdata})" if server else ""))
        print(f"page: http://{settings.http_host}:{settings.http_port}/")
        print(f"data directory: {settings.data_dir.resolve()}")
        print("processes: " + (", ".join(s.name for s in specs) or "(none built yet)"))
        if settings.tokens_generated:
            print(f"tokens (generated once, kept in {settings.data_dir / 'tokens'}):")
            for token, role in settings.tokens.items():
                print(f"  {role}: {token}")
        sys.stdout.flush()

    try:
        Supervisor(specs).run(on_started=summary)
    finally:
        if server is not None and server.started_here:
            server.stop()
    return 0


def _runtime():
    from services.ai_runtime import cli

    return cli


def _not_yet(name: str, issue: str):
    def run(settings: Settings, args) -> int:
        print(f"linectl {name}: not built yet ({issue})", file=sys.stderr)
        return 3

    return run


COMMANDS = {
    "migrate": (cmd_migrate, "Alembic upgrade to head"),
    "up": (cmd_up, "the whole stack in the foreground"),
    "sim": (_not_yet("sim", "the simulator arrives with the hardware issue"), "the Modbus TCP line simulator"),
    "shell": (_not_yet("shell", "arrives with the deployment issue"), "nameko shell with the project's config"),
    "runtime": (lambda settings, args: _runtime().cmd_runtime(settings, args), "the reference AI Runtime worker"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="linectl", description="linectl line-control backend")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_fn, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == "migrate":
            p.add_argument("revision", nargs="?", default="head")
        if name == "runtime":
            _runtime().add_arguments(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"linectl: bad setting: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    fn, _help = COMMANDS[args.command]
    try:
        return fn(settings, args)
    except SettingsError as exc:
        print(f"linectl: bad setting: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
