"""argon2id password hashes (argon2-cffi). An unknown user name is checked
against a dummy hash of the same parameters, so it costs the same work as a
wrong password. Nothing here logs a password or a hash."""

from __future__ import annotations

import secrets

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_PASSWORD_LENGTH = 12
MAX_PASSWORD_LENGTH = 1024  # bounds the hash work a request can ask for


class PasswordRefused(ValueError):
    """A new password that does not meet the rules (the message says which)."""


def check_new_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise PasswordRefused(f"a password has at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise PasswordRefused(f"a password has at most {MAX_PASSWORD_LENGTH} characters")


def generated_password() -> str:
    return secrets.token_urlsafe(18)  # 24 characters


class Passwords:
    """Hash and verify with one set of argon2id parameters."""

    def __init__(self, time_cost: int, memory_kib: int):
        self._hasher = PasswordHasher(time_cost=time_cost, memory_cost=memory_kib, type=Type.ID)
        self._dummy = None  # made on first use: creating an app costs no hash

    @classmethod
    def from_settings(cls, settings) -> Passwords:
        return cls(settings.argon2_time_cost, settings.argon2_memory_kib)

    def hash(self, password: str) -> str:
        check_new_password(password)
        return self._hasher.hash(password)

    def verify(self, stored_hash: str | None, password: str) -> bool:
        """Whether ``password`` matches; with no hash (an unknown user) the same
        work is done against the dummy hash, and the answer is False."""
        password = password[:MAX_PASSWORD_LENGTH + 1]
        if self._dummy is None:
            self._dummy = self._hasher.hash(secrets.token_urlsafe(16))
        try:
            ok = self._hasher.verify(stored_hash or self._dummy, password)
        except (VerifyMismatchError, VerificationError, InvalidHashError):
            return False
        return ok and stored_hash is not None
