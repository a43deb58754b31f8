"""The ``linectl`` command: argparse wiring; each sub-command runs from its
module in ``services/stack/commands/``.

    linectl up        the whole stack in the foreground (a plant: --lines ID,… / --no-lines)
    linectl migrate   Alembic upgrade to head (and the plant's lines registered)
    linectl sim       the line simulator alone (a plant's line: --line ID)
    linectl shell     nameko shell with the project's config
    linectl runtime   the reference AI Runtime worker
    linectl backup    pg_dump of the database (embedded or LINECTL_DATABASE_URL)
    linectl restore   a backup into an empty database (--force: replace what is there)
    linectl users     local users: add, passwd, disable, enable, list
    linectl lines     a line's database URL: lines credentials ID [--rotate]

A bad setting, a bad plant file (``LINECTL_PLANT_FILE``) or a line the plant
does not have stops any sub-command with one line naming it (exit status 2).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import logging
import os
import sys
from importlib.metadata import PackageNotFoundError, version

from services.ai_runtime import cli as runtime_cli
from services.stack.commands import users_arguments
from services.stack.supervisor import CannotRun
from shared.config import MAX_RETENTION_DAYS, SettingsError, load_settings
from shared.logs import configure_logging
from shared.plant import PlantError

# name -> (module in services.stack.commands and its function, or a function; help).
# A command's module is imported when it runs: `linectl sim` loads no nameko.
COMMANDS = {
    "migrate": ("migrate:run", "Alembic upgrade to head"),
    "up": ("up:run", "the whole stack in the foreground"),
    "sim": ("sim:run", "the line simulator (Modbus TCP or OPC UA; a plant's line: --line ID)"),
    "shell": ("shell:run", "nameko shell with the project's config and helpers"),
    "purge": ("retention:run_purge",
              "delete old event log, messages, audit rows, dead letters and finished AI jobs"),
    "retention": ("retention:run_retention",
                  "purge on a schedule (LINECTL_RETENTION_INTERVAL_SECONDS) until stopped"),
    "runtime": (runtime_cli.cmd_runtime, "the reference AI Runtime worker"),
    "backup": ("backup_restore:run_backup", "a consistent pg_dump of the database (default: <data dir>/backups/)"),
    "restore": ("backup_restore:run_restore",
                "restore a backup into an empty database (--force replaces what is there)"),
    "users": ("users:run", "local users: add, passwd, disable, enable, list"),
    "lines": ("lines:run", "a line's database URL, its own login: credentials ID [--rotate]"),
    "export": ("export:run_export", "an archive file of piece records: pieces --from --to --format csv|jsonl"),
}


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


def _version() -> str:
    try:
        return version("linectl")
    except PackageNotFoundError:  # a checkout on sys.path without an install
        return "0+checkout"


def _migrate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("revision", nargs="?", default="head")
    p.add_argument("--lock-timeout", default=None,
                   help="how long a migration waits for a table lock, e.g. 5s (the default) or 500ms")


def _retention_args(p: argparse.ArgumentParser) -> None:
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


def _up_args(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group()
    which.add_argument("--lines", metavar="ID[,ID...]", default=None,
                       help="run only these lines of the plant (LINECTL_PLANT_FILE): their simulators, "
                            "hardware and line_controllers, no gateway (a line host)")
    which.add_argument("--no-lines", action="store_true",
                       help="run the gateway and retention only (the lines run on other hosts)")


def _sim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--line", metavar="ID", default=None,
                   help="the plant's line ID (LINECTL_PLANT_FILE): its layout, protocol and port "
                        "(LINECTL_SIM_PORT + its place in the plant)")
    p.add_argument("--port", type=int, default=None,
                   help="listen port (default LINECTL_SIM_PORT)")
    p.add_argument("--protocol", choices=("modbus", "opcua"), default=None,
                   help="what the simulator speaks (default LINECTL_SIM_PROTOCOL, modbus; "
                        "with --line, the line's)")
    p.add_argument("--scrap-rate", type=_rate, default=0.05,
                   help="inspection fail probability, 0..1 (default 0.05)")
    p.add_argument("--seed", type=int, default=None,
                   help="fix inspection outcomes and barcodes")
    p.add_argument("--pallet-size", type=int, default=4, help="pieces per pallet (default 4)")
    p.add_argument("--pallet-seconds", type=_positive, default=30.0,
                   help="simulated seconds before a new pallet once the dock is empty")


def _dump_args(p: argparse.ArgumentParser, *, restore: bool) -> None:
    p.add_argument("file", nargs=None if restore else "?",
                   help="the dump (backup default: <LINECTL_DATA_DIR>/backups/linectl-<UTC time>.dump)")
    p.add_argument("--pg-bin", default=None,
                   help="directory of pg_dump/pg_restore/psql of the server's major version")
    if restore:
        p.add_argument("--force", action="store_true",
                       help="replace what the database holds (in the restore's one transaction)")


def _lines_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="lines_command", required=True)
    credentials = sub.add_parser("credentials", help="print the URL the line's processes log in with")
    credentials.add_argument("line", metavar="ID", help="a line of the plant")
    credentials.add_argument("--rotate", action="store_true",
                             help="a new password, stored and set on the line's role (restart the line)")


def _export_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="export_what", required=True)
    pieces = sub.add_parser("pieces", help="the records of the pieces made in a window")
    pieces.add_argument("--from", dest="from_", required=True, help="ISO-8601 (no offset: UTC), inclusive")
    pieces.add_argument("--to", required=True, help="ISO-8601 (no offset: UTC), exclusive")
    pieces.add_argument("--format", choices=("csv", "jsonl"), default="csv")
    pieces.add_argument("--output", default=None,
                        help="the file (default <LINECTL_DATA_DIR>/exports/pieces-<from>-<to>.<format>)")
    pieces.add_argument("--line", default=None, metavar="ID", help="one line's pieces (default: every line's)")


ARGUMENTS = {
    "migrate": _migrate_args,
    "purge": _retention_args,
    "retention": _retention_args,
    "sim": _sim_args,
    "up": _up_args,
    "runtime": runtime_cli.add_arguments,
    "backup": functools.partial(_dump_args, restore=False),
    "restore": functools.partial(_dump_args, restore=True),
    "users": users_arguments.add_arguments,
    "lines": _lines_args,
    "export": _export_args,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="linectl", description="linectl line-control backend")
    parser.add_argument("--version", action="version", version=f"linectl {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (_target, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        if name in ARGUMENTS:
            ARGUMENTS[name](p)
    return parser


def _command(name: str):
    target, _help = COMMANDS[name]
    if callable(target):
        return target
    module, _, function = target.partition(":")
    return getattr(importlib.import_module(f"services.stack.commands.{module}"), function)


# The stack's own processes: once the command has returned, everything they opened
# is closed (children stopped, the database stopped, engines disposed), and the
# interpreter's teardown of all they imported took tenths of a second of every stop.
LEAVE_AT_ONCE = ("up", "retention")


# Commands that answer and end: what they print is their answer, and their log
# (stderr) says only WARNING and above; LINECTL_LOG_LEVEL=DEBUG still says all.
ANSWERING = ("users", "lines", "migrate", "purge", "backup", "restore", "export")


def _log_level(command: str, level: str) -> str:
    return "WARNING" if command in ANSWERING and level == "INFO" else level


def _run(args) -> int:
    try:
        settings = load_settings()
    except SettingsError as exc:
        print(f"linectl: bad setting: {exc}", file=sys.stderr)
        return 2
    configure_logging(_log_level(args.command, settings.log_level), settings.log_format,
                      f"linectl-{args.command}")
    try:
        return _command(args.command)(settings, args)
    except SettingsError as exc:
        print(f"linectl: bad setting: {exc}", file=sys.stderr)
        return 2
    except PlantError as exc:
        print(f"linectl {args.command}: {exc}", file=sys.stderr)
        return 2
    except CannotRun as exc:  # a simulator's port is another's: stopped, one line says so
        print(f"linectl {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code = _run(args)
    if args.command in LEAVE_AT_ONCE:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
