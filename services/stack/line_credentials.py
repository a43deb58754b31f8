"""A line's database credentials (PRODUCT.md, "Line credentials";
docs/operations.md, "Line credentials").

Each line's processes log in as the line's own role (``shared.db.lines``:
``linectl_line_<id>``), with a URL that names the same servers and database as
the owner's and that login. Its password comes from, in this order:

- the plant file's secrets file (``secrets: line-secrets.yaml`` in the plant
  file, relative to it; mode 0600), which gives whole URLs::

      lines:
        cell-b: postgresql://linectl_line_cell-b:PASSWORD@db1:5432,db2:5432/linectl?target_session_attrs=read-write

- else ``<data dir>/lines/<id>.password``, generated once (mode 0600, as the
  embedded server's ``pg.password``).

``linectl migrate`` (with a plant file), ``linectl up`` and ``linectl lines
credentials`` set the role's password to that one (:func:`ensure_logins`; the
migrating user needs CREATEROLE or superuser; else a DBA makes the role and the
secrets file gives its URL). A line host (``linectl up --lines cell-b``) given
only cell-b's URL, as its ``LINECTL_DATABASE_URL`` or in the secrets file,
migrates nothing (:func:`given_logins`)."""

from __future__ import annotations

import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit

import yaml
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from shared.config import Settings, mask_url
from shared.config.database import server_list
from shared.db.engine import make_engine
from shared.db.lines import LoginNotSet, login_role_for, placements, set_login
from shared.layout import YAML_LOADER
from shared.plant import Plant, PlantError
from shared.secret_files import read_or_create_private, replace_private

SECRETS_KEYS = {"lines"}


class LineCredentialsError(PlantError):
    """A line without usable credentials; ``str()`` is one line naming it."""


def password_file(settings: Settings, line_id: str) -> Path:
    return settings.data_dir / "lines" / f"{line_id}.password"


def new_password() -> bytes:
    return secrets.token_urlsafe(24).encode()  # URL-safe: nothing to escape in a URL


def with_login(url: str, user: str, password: str) -> str:
    """``url``'s servers, database and options, logged in as ``user``."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    hosts = netloc.rpartition("@")[2]
    return f"{scheme}{sep}{quote(user, safe='')}:{quote(password, safe='')}@{hosts}{slash}{tail}"


def login_of(url: str) -> str | None:
    """The user a URL logs in as."""
    userinfo, at, _hosts = urlsplit(url).netloc.rpartition("@")
    return unquote(userinfo.partition(":")[0]) if at else None


def given_urls(plant: Plant | None) -> dict[str, str]:
    """The lines' URLs the plant file's secrets file gives (none without one)."""
    if plant is None or plant.secrets_file is None:
        return {}
    path = plant.secrets_file
    try:
        mode = path.stat().st_mode
        data = yaml.load(path.read_text(), Loader=YAML_LOADER)
    except (OSError, yaml.YAMLError) as exc:
        raise LineCredentialsError(f"secrets file {path}: {str(exc).splitlines()[0]}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise LineCredentialsError(f"secrets file {path}: others may read it (mode {stat.S_IMODE(mode):o});"
                                   " run chmod 600 on it")
    if not isinstance(data, dict) or set(map(str, data)) - SECRETS_KEYS or not isinstance(data.get("lines"), dict):
        raise LineCredentialsError(f"secrets file {path}: expected 'lines:' mapping line ids to database URLs")
    urls = {}
    for line_id, url in data["lines"].items():
        where = f"secrets file {path}: lines.{line_id}"
        if str(line_id) not in plant.line_ids:
            raise LineCredentialsError(f"{where}: the plant has no such line (its lines: {', '.join(plant.line_ids)})")
        url = str(url).strip()
        parts = urlsplit(url)
        try:
            server_list(url)
        except ValueError as exc:
            raise LineCredentialsError(f"{where}: a server in the URL is malformed ({exc})") from None
        if parts.scheme not in ("postgresql", "postgres") or not parts.path.strip("/"):
            raise LineCredentialsError(f"{where}: expected postgresql://user:password@host:port/database")
        if login_of(url) != login_role_for(str(line_id)) or not urlsplit(url).password:
            raise LineCredentialsError(f"{where}: expected {login_role_for(str(line_id))} and its password"
                                       f" in the URL, got {mask_url(url)}")
        urls[str(line_id)] = url
    return urls


def given_logins(settings: Settings, plant: Plant | None, line_ids: Iterable[str]) -> dict[str, str] | None:
    """A line host's URLs when every line of ``line_ids`` has its own, from the
    secrets file or as ``LINECTL_DATABASE_URL`` (its user that line's login); None
    when one has not (the host then migrates with the owner's URL)."""
    given = given_urls(plant)
    own = settings.database_url
    urls = {}
    for line_id in line_ids:
        if line_id in given:
            urls[line_id] = given[line_id]
        elif own and login_of(own) == login_role_for(line_id):
            urls[line_id] = own
        else:
            return None
    return urls


def ensure_logins(owner_url: str, settings: Settings, plant: Plant, line_ids: Iterable[str],
                  rotate: bool = False) -> dict[str, str]:
    """Each line's URL, its role's password set to it (the secrets file's, else the
    data directory's, generated once; ``rotate``: a new one). The lines must be
    registered (``shared.db.lines.register_lines``)."""
    given = given_urls(plant)
    urls = {}
    engine = make_engine(owner_url, pool_size=1)
    try:
        with engine.begin() as conn:
            placed = placements(conn)
            for line_id in line_ids:
                if line_id in given:
                    if rotate:
                        raise LineCredentialsError(
                            f"line {line_id}: its password is the secrets file's ({plant.secrets_file}):"
                            " change it there, then run `linectl migrate`")
                    urls[line_id] = given[line_id]
                else:
                    path = password_file(settings, line_id)
                    if rotate:
                        replace_private(path, new_password())
                    password = read_or_create_private(path, new_password).decode()
                    urls[line_id] = with_login(owner_url, login_role_for(line_id), password)
                try:
                    set_login(conn, placed[line_id], unquote(urlsplit(urls[line_id]).password))
                except LoginNotSet as exc:
                    if line_id not in given:
                        raise LineCredentialsError(str(exc)) from None
                    # the DBA made the role with the secrets file's password
    finally:
        engine.dispose()
    return urls


def check_migrated(line_urls: dict[str, str], heads: tuple[str, ...]) -> None:
    """A line host's database: reachable with each line's URL, registered and at
    ``heads`` (its migrate runs elsewhere). :class:`LineCredentialsError` says what is not."""
    for line_id, url in line_urls.items():
        engine = make_engine(url, pool_size=1)
        try:
            with engine.connect() as conn:
                revision = tuple(conn.execute(text("SELECT version_num FROM alembic_version")).scalars())
                registered = line_id in placements(conn)
        except OperationalError as exc:
            raise LineCredentialsError(f"line {line_id}: cannot log in with {mask_url(url)}: "
                                       f"{str(exc.orig).strip().splitlines()[0]}") from None
        finally:
            engine.dispose()
        if set(revision) != set(heads):
            raise LineCredentialsError(f"line {line_id}: the database is at revision {', '.join(revision) or '(none)'},"
                                       f" this linectl needs {', '.join(heads)}: run `linectl migrate` where the"
                                       " owner's URL is (a line's login migrates nothing)")
        if not registered:
            raise LineCredentialsError(f"line {line_id}: not registered in the database: run `linectl migrate`"
                                       " with the plant file where the owner's URL is")
