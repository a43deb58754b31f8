"""AI job queue settings: lease and timeout lengths, the retry back-off, and the
key that encrypts users' model keys at rest."""

from __future__ import annotations

import base64
import binascii
import dataclasses

from .parse import PREFIX, SettingsError, floats, ints, setting


def _fernet_key(name: str, raw: str) -> str:
    raw = raw.strip()
    try:
        ok = len(base64.urlsafe_b64decode(raw.encode())) == 32
    except (binascii.Error, ValueError):
        ok = False
    if not ok:
        raise SettingsError(f"{PREFIX}{name}: expected a Fernet key (32 bytes, url-safe base64)")
    return raw


@dataclasses.dataclass(frozen=True)
class AiSettings:
    ai_lock_seconds: int = setting(60, ints(1, 86400))
    ai_timeout_seconds: int = setting(120, ints(1, 86400))
    ai_retry_backoff_seconds: float = setting(2.0, floats(-1.0, 3600.0))
    ai_credential_key: str | None = setting(None, _fernet_key)  # Fernet key; unset -> <data_dir>/ai_credential.key
