"""What a running line process holds (PRODUCT.md, "Line credentials"), read
from outside as an attacker on the line's host would: its environment, every
file a variable of it names, and every file under every directory one names
(``LINECTL_DATA_DIR``, any ``*_FILE`` or ``*_DIR``); each database credential
found there, and each word of a small file tried as a password, can then be
tried against PostgreSQL (:func:`try_writes`)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from urllib.parse import quote, urlsplit

import psycopg2

DATABASE_SCHEMES = ("postgresql://", "postgres://", "pgsql://")
URL_PATTERN = re.compile(r"(?:postgresql|postgres|pgsql)://[^\s'\"]+")
MAX_FILE_BYTES = 1_000_000
MAX_FILES = 20_000  # a data directory with a database cluster in it: enough to reach its small files
PASSWORD_FILE_CHARS = 200  # a file this short is read word by word as passwords


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def named_paths(pid: int, env: dict[str, str]) -> dict[str, Path]:
    """The paths the process's variables name: LINECTL_DATA_DIR and every
    ``LINECTL_*FILE``/``*_DIR`` and ``PG*FILE`` (PGPASSFILE, PGSERVICEFILE), relative
    ones from its working directory."""
    cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
    return {name: cwd / value for name, value in env.items()
            if value and name.startswith(("LINECTL_", "PG")) and name.endswith(("FILE", "_DIR"))}


def files_under(path: Path) -> list[Path]:
    """``path`` if a file, else every file under it (links not followed)."""
    if path.is_file():
        return [path]
    found = []
    for root, _dirs, names in os.walk(path) if path.is_dir() else ():
        found += [Path(root) / name for name in names]
        if len(found) >= MAX_FILES:
            break
    return found


def held_files(pid: int, env: dict[str, str]) -> dict[str, str]:
    """The text of every file the process's environment names or names a directory
    of, and of the secrets file a plant file names."""
    paths = [p for path in named_paths(pid, env).values() for p in files_under(path)]
    if env.get("LINECTL_PLANT_FILE"):
        from shared.plant import load_plant

        secrets = load_plant(env["LINECTL_PLANT_FILE"]).secrets_file
        if secrets is not None:
            paths.append(secrets)
    texts = {}
    for path in paths:
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size < MAX_FILE_BYTES:
                texts[str(path)] = path.read_bytes().decode(errors="replace")
        except OSError:
            pass  # gone meanwhile, or not ours to read
    return texts


def credentials_held(env: dict[str, str], files: dict[str, str], users: tuple[str, ...]) -> set[str]:
    """Every database URL in the environment or in a file it names; each word of a
    short file (a password file) tried as each of ``users`` on the same server."""
    found = [v for v in env.values() if v.startswith(DATABASE_SCHEMES)]
    for text in files.values():
        found += URL_PATTERN.findall(text)
    urls = {"postgresql://" + url.split("://", 1)[1] for url in found}
    server = next(iter(sorted(urls)), None)  # a password alone: tried on the same server
    for text in files.values():
        for word in {w.strip() for w in text.split()} if server and len(text) < PASSWORD_FILE_CHARS else ():
            for user in users:
                urls.add(with_user(server, user, word))
    return urls


def with_user(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    return parts._replace(netloc=f"{user}:{quote(password, safe='')}@{parts.netloc.rpartition('@')[2]}").geturl()


@functools.cache
def _refusals(url: str, statements: tuple[str, ...]) -> tuple[str | None, ...]:
    try:
        conn = psycopg2.connect(url, connect_timeout=5)
    except psycopg2.OperationalError as exc:
        return (str(exc).strip().splitlines()[0],) * len(statements)
    said = []
    try:
        for sql in statements:
            try:
                with conn.cursor() as cur:
                    cur.execute(sql)
                said.append(None)
            except psycopg2.Error as exc:
                said.append(str(exc).strip().splitlines()[0])
            conn.rollback()
    finally:
        conn.close()
    return tuple(said)


def try_writes(url: str, statements: list[str]) -> list[str | None]:
    """For each statement, PostgreSQL's refusal (at login or of the statement), or
    None when it wrote (each is rolled back). A line's processes hold the same: asked once."""
    return list(_refusals(url, tuple(statements)))


def refused(answer: str | None) -> bool:
    return answer is not None and (answer.startswith("permission denied")
                                   or "password authentication failed" in answer)
