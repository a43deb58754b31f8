"""Database settings: where PostgreSQL is (or the embedded one's port), and
whether each process's connections take their writer role."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from .parse import PREFIX, SettingsError, parse_bool, parse_int


@dataclasses.dataclass(frozen=True)
class DatabaseSettings:
    database_url: str | None = None
    embedded_pg_port: int = 54329
    # Each process's domain connections take their writer role (shared.db.roles).
    db_roles: bool = True

    def db_role(self, role: str) -> str | None:
        """The PostgreSQL role a process's domain connections take, or None when off."""
        return role if self.db_roles else None


def _db_url(name: str, raw: str) -> str:
    raw = raw.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
        raise SettingsError(
            f"{PREFIX}{name}: expected postgresql://user@host:port/db, got scheme {parts.scheme!r}"
        )
    if not parts.path.strip("/"):
        raise SettingsError(f"{PREFIX}{name}: the URL names no database")
    return "postgresql://" + raw.split("://", 1)[1]


def mask_url(url: str) -> str:
    """A URL fit to print: any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


# name -> (field, parser)
PARSERS = {
    "DATABASE_URL": ("database_url", _db_url),
    "EMBEDDED_PG_PORT": ("embedded_pg_port", lambda n, r: parse_int(n, r, 1024, 65535)),
    "DB_ROLES": ("db_roles", parse_bool),
}
