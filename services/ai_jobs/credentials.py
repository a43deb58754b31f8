"""Users' own model keys, encrypted at rest with Fernet.

The key comes from ``LINECTL_AI_CREDENTIAL_KEY`` (a Fernet key) when set,
else from ``<LINECTL_DATA_DIR>/ai_credential.key``, created once (mode 0600).
Plain keys leave this module only towards the runtime that holds a lock on a
job naming the credential; they are never logged.
"""

from __future__ import annotations

from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken

from shared.secret_files import read_or_create_private


class CredentialBox:
    def __init__(self, fernet_key: bytes | str):
        self._fernet = Fernet(fernet_key)

    @classmethod
    def from_settings(cls, settings) -> CredentialBox:
        if settings.ai_credential_key:
            return cls(settings.ai_credential_key)
        return cls(read_or_create_private(Path(settings.data_dir) / "ai_credential.key", Fernet.generate_key))

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
