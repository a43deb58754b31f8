"""Retention settings (shared/db/retention.py): days kept per kind of row, and
how often the stack's retention job runs (0: never; run `linectl purge` from a
timer instead)."""

from __future__ import annotations

import dataclasses

from .parse import ints, parse_int, setting

MAX_RETENTION_DAYS = 36500


def _days(name: str, raw: str) -> int:
    return parse_int(name, raw, 1, MAX_RETENTION_DAYS)


@dataclasses.dataclass(frozen=True)
class RetentionSettings:
    retention_event_days: int = setting(30, _days)
    retention_ai_days: int = setting(90, _days)
    retention_audit_days: int = setting(365, _days)
    retention_dead_letter_days: int = setting(14, _days)
    # Piece records (PRODUCT.md, "Piece traceability"): quality keeps them for years.
    piece_retention_days: int = setting(3650, _days)
    # Events the MQTT broker has not acknowledged (services.uns) outlive event_days up to
    # this bound; past it retention purges them anyway, counts and logs them.
    retention_unpublished_days: int = setting(90, _days)
    retention_interval_seconds: int = setting(3600, ints(0, 7 * 86400))
