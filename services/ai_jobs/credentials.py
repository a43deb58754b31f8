"""Users' own model keys, encrypted at rest with Fernet.

The key comes from ``LINECTL_AI_CREDENTIAL_KEY`` (a Fernet key) when set,
else from ``<LINECTL_DATA_DIR>/ai_credential.key``, created once (mode 0600).
Plain keys leave this module only towards the runtime that holds a lock on a
job naming the credential; they are never logged.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken


class CredentialBox:
    def __init__(self, fernet_key: bytes | str):
        self._fernet = Fernet(fernet_key)

    @classmethod
    def from_settings(cls, settings) -> CredentialBox:
        if settings.ai_credential_key:
            return cls(settings.ai_credential_key)
        path = Path(settings.data_dir) / "ai_credential.key"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                pass  # another process created it first
            else:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(Fernet.generate_key())
        return cls(path.read_bytes().strip())

    def seal(self, plain: str) -> bytes:
        return self._fernet.encrypt(plain.encode("utf-8"))

    def open(self, sealed: bytes) -> str:
        try:
            return self._fernet.decrypt(bytes(sealed)).decode("utf-8")
        except InvalidToken:
            raise ValueError("the credential cannot be decrypted with this key") from None

    @staticmethod
    def hint(plain: str) -> str:
        return "…" + plain[-4:] if len(plain) >= 8 else "…"
