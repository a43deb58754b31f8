"""Secrets generated once into a file only its owner may read (mode 0600)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def read_or_create_private(path: Path, make: Callable[[], bytes]) -> bytes:
    """The file's content, stripped; created with ``make()`` if it does not exist.
    ``O_EXCL`` makes concurrent first starts agree on one value."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # another process made it first
        else:
            with os.fdopen(fd, "wb") as fh:
                fh.write(make())
    return path.read_bytes().strip()
