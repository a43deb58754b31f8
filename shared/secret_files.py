"""Secrets generated once into a file only its owner may read (mode 0600)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def read_or_create_private(path: Path, make: Callable[[], bytes]) -> bytes:
    """The file's content, stripped; created with ``make()`` if it does not exist.

    Concurrent first starts (a gateway's workers) agree on one value: each writes
    its own whole under a private name and links it into place, which only the
    first does. A process that loses reads the winner's value, never a file that
    exists but is not written yet."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(make())
            try:
                os.link(staged, path)
            except FileExistsError:
                pass  # another process made it first
        finally:
            os.unlink(staged)
    return path.read_bytes().strip()


def replace_private(path: Path, content: bytes) -> None:
    """``path`` now holds ``content`` (mode 0600): written whole under a private
    name, then renamed over the old file, so a reader sees the old or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, staged = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
        os.replace(staged, path)
    except BaseException:
        os.unlink(staged)
        raise
