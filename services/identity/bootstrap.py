"""The first start with no user creates ``admin`` with a generated password:
printed once by the caller, and kept in ``<data dir>/initial-admin-password``
(mode 0600) for whoever starts the stack next."""

from __future__ import annotations

import os
from pathlib import Path

from services.identity.passwords import Passwords, generated_password
from services.identity.users import Actor, UserError, UserStore
from shared.db.engine import make_engine

INITIAL_ADMIN = "admin"
PASSWORD_FILE = "initial-admin-password"


def ensure_initial_admin(engine, settings) -> str | None:
    """Create ``admin`` if there is no user; its password, or None when users exist."""
    store = UserStore(engine, Passwords.from_settings(settings))
    if store.count():
        return None
    password = generated_password()
    try:
        store.add(INITIAL_ADMIN, "admin", password, Actor("linectl up"), display_name="Administrator")
    except UserError:
        return None  # another process made it first
    write_secret(Path(settings.data_dir) / PASSWORD_FILE, password)
    return password


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (created 0600, never wider)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    os.chmod(path, 0o600)


def initial_admin_at(url: str, settings) -> str | None:
    """:func:`ensure_initial_admin` on the database at ``url`` (for ``linectl up``)."""
    engine = make_engine(url, pool_size=1)
    try:
        return ensure_initial_admin(engine, settings)
    finally:
        engine.dispose()


def announce(password: str | None, settings) -> None:
    """Print the generated password, the one time it exists."""
    if password:
        print(f"user admin created; password (printed once, kept in "
              f"{Path(settings.data_dir) / PASSWORD_FILE}): {password}", flush=True)
