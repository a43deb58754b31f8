"""The database a command works on: ``LINECTL_DATABASE_URL``, else the embedded
PostgreSQL under the data directory, started (or reused) for it."""

from __future__ import annotations

from shared.config import Settings, SettingsError
from shared.db.embedded import EmbeddedPostgres


def database_url(settings: Settings, *, start_embedded: bool = True) -> tuple[str, EmbeddedPostgres | None]:
    """The database to use, and the embedded server we started (or reused) for it."""
    if settings.database_url:
        return settings.database_url, None
    if not start_embedded:
        raise SettingsError("LINECTL_DATABASE_URL: not set, and no embedded server may be started here")
    server = EmbeddedPostgres(settings.data_dir / "pg", port=settings.embedded_pg_port)
    return server.start(), server


def stop_if_started(server: EmbeddedPostgres | None) -> None:
    """Stop the embedded server if this command started it (not one already running)."""
    if server is not None and server.started_here:
        server.stop()
