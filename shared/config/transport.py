"""Message transport settings: the kombu URI the services and the gateway talk
over (``pgsql://`` on the database unless set), and the nameko config."""

from __future__ import annotations

import dataclasses
from urllib.parse import urlsplit

from .parse import PREFIX, SettingsError, setting


def _amqp_uri(name: str, raw: str) -> str:
    raw = raw.strip()
    scheme = urlsplit(raw).scheme
    if scheme not in ("pgsql", "amqp", "amqps", "pyamqp", "memory"):
        raise SettingsError(
            f"{PREFIX}{name}: expected pgsql://… or amqp://…, got scheme {scheme!r}"
        )
    return raw


@dataclasses.dataclass(frozen=True)
class TransportSettings:
    amqp_uri: str | None = setting(None, _amqp_uri)

    def resolved_amqp_uri(self, database_url: str | None = None) -> str:
        """The message transport URI: explicit, else ``pgsql://`` on the database."""
        if self.amqp_uri:
            return self.amqp_uri
        db = database_url or self.database_url
        if not db:
            raise SettingsError(
                "LINECTL_AMQP_URI: unset and no database URL to derive pgsql:// from"
            )
        return "pgsql://" + db.split("://", 1)[1]
