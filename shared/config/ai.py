"""AI job queue settings: lease and timeout lengths, the retry back-off, and the
key that encrypts users' model keys at rest."""

from __future__ import annotations

import base64
import binascii
import dataclasses

from .parse import PREFIX, SettingsError, parse_float, parse_int


@dataclasses.dataclass(frozen=True)
class AiSettings:
    ai_lock_seconds: int = 60
    ai_timeout_seconds: int = 120
    ai_retry_backoff_seconds: float = 2.0
    ai_credential_key: str | None = None  # Fernet key; unset -> <data_dir>/ai_credential.key


def _fernet_key(name: str, raw: str) -> str:
    raw = raw.strip()
    try:
        ok = len(base64.urlsafe_b64decode(raw.encode())) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise SettingsError(f"{PREFIX}{name}: expected a Fernet key (32 bytes, url-safe base64)")
    return raw


PARSERS = {
    "AI_LOCK_SECONDS": ("ai_lock_seconds", lambda n, r: parse_int(n, r, 1, 86400)),
    "AI_TIMEOUT_SECONDS": ("ai_timeout_seconds", lambda n, r: parse_int(n, r, 1, 86400)),
    "AI_RETRY_BACKOFF_SECONDS": ("ai_retry_backoff_seconds", lambda n, r: parse_float(n, r, -1.0, 3600.0)),
    "AI_CREDENTIAL_KEY": ("ai_credential_key", _fernet_key),
}
