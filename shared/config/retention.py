"""Retention settings (shared/db/retention.py): days kept per kind of row, and
how often the stack's retention job runs (0: never; run `linectl purge` from a
timer instead)."""

from __future__ import annotations

import dataclasses

from .parse import parse_int

MAX_RETENTION_DAYS = 36500


@dataclasses.dataclass(frozen=True)
class RetentionSettings:
    retention_event_days: int = 30
    retention_ai_days: int = 90
    retention_audit_days: int = 365
    retention_dead_letter_days: int = 14
    # Piece records (PRODUCT.md, "Piece traceability"): quality keeps them for years.
    piece_retention_days: int = 3650
    # Events the MQTT broker has not acknowledged (services.uns) outlive event_days up to
    # this bound; past it retention purges them anyway, counts and logs them.
    retention_unpublished_days: int = 90
    retention_interval_seconds: int = 3600


def _days(name: str, raw: str) -> int:
    return parse_int(name, raw, 1, MAX_RETENTION_DAYS)


PARSERS = {
    "RETENTION_EVENT_DAYS": ("retention_event_days", _days),
    "RETENTION_AI_DAYS": ("retention_ai_days", _days),
    "RETENTION_AUDIT_DAYS": ("retention_audit_days", _days),
    "RETENTION_DEAD_LETTER_DAYS": ("retention_dead_letter_days", _days),
    "PIECE_RETENTION_DAYS": ("piece_retention_days", _days),
    "RETENTION_UNPUBLISHED_DAYS": ("retention_unpublished_days", _days),
    "RETENTION_INTERVAL_SECONDS": ("retention_interval_seconds", lambda n, r: parse_int(n, r, 0, 7 * 86400)),
}
