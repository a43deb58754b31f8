"""Database settings: where PostgreSQL is (or the embedded one's port), and
whether each process's connections take their writer role."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from .parse import PREFIX, SettingsError, ints, parse_bool, setting


def server_list(url: str) -> list[tuple[str, int | None]]:
    """The servers a URL names, in order: one, or several in libpq's multi-host
    form (``postgresql://u:p@db1:5432,db2:5432/linectl?target_session_attrs=read-write``),
    which libpq tries in turn for a server that accepts writes. ValueError if one
    is malformed."""
    hostlist = urlsplit(url).netloc.rpartition("@")[2]
    servers = []
    for entry in hostlist.split(","):
        if entry.startswith("["):  # [v6]:port
            host, _, rest = entry[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        else:
            host, _, port = entry.partition(":")
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise ValueError(f"not a port: {port!r}")
        servers.append((host, int(port) if port else None))
    if len(servers) > 1 and not all(h for h, _ in servers):
        raise ValueError("an empty host in the list")
    return servers


def _db_url(name: str, raw: str) -> str:
    raw = raw.strip()
    parts = urlsplit(raw)
    if parts.scheme not in ("postgresql", "postgres", "postgresql+psycopg2"):
        raise SettingsError(
            f"{PREFIX}{name}: expected postgresql://user@host:port/db, got scheme {parts.scheme!r}"
        )
    if not parts.path.strip("/"):
        raise SettingsError(f"{PREFIX}{name}: the URL names no database")
    try:
        server_list(raw)
    except ValueError as exc:
        raise SettingsError(f"{PREFIX}{name}: a server in the URL is malformed ({exc})") from None
    return "postgresql://" + raw.split("://", 1)[1]


def mask_url(url: str, mask: str = "***") -> str:
    """A URL fit to print: any password replaced by ``mask`` (every server kept)."""
    parts = urlsplit(url)
    userinfo, at, hostlist = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return parts._replace(netloc=f"{userinfo.partition(':')[0]}:{mask}@{hostlist}").geturl()


@dataclasses.dataclass(frozen=True)
class DatabaseSettings:
    database_url: str | None = setting(None, _db_url)
    embedded_pg_port: int = setting(54329, ints(1024, 65535))
    # Each process's domain connections take their writer role (shared.db.roles).
    db_roles: bool = setting(True, parse_bool)

    def db_role(self, role: str) -> str | None:
        """The PostgreSQL role a process's domain connections take, or None when off."""
        return role if self.db_roles else None
