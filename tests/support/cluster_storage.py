"""Where the suite's PostgreSQL clusters keep their files: in memory (tmpfs) when
the machine has one with room, else where they would be anyway.

Each test gets a database cloned from a template: about 300 files created, and
dropped again after it. On ext4, after some thousands of such files, every new
one waits on the inode allocator skipping recently deleted inodes (the kernel's
``recently_deleted``): a clone took 150 to 300 CPU-ms there, 17 on tmpfs.
The clusters are throw-away (``fsync=off``), so memory loses nothing.

As root, the embedded clusters live under ``LINECTL_EMBEDDED_PG_ROOT``
(``shared.db.embedded``): it is set here, before that module is imported, for
this process and the stacks it starts. A directory there that root does not own
is not used: /dev/shm is writable by anyone.

A cluster whose data directory a test made under the session's temporary
directory goes with the session (:func:`remove_clusters_linked_under`), its
server stopped first, whatever the test left running.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

MEMORY = Path("/dev/shm")
ROOM = 2 << 30  # bytes free: four shards' clusters with their WAL


def memory_dir() -> Path | None:
    """A tmpfs directory with room, or None."""
    try:
        mounts = Path("/proc/mounts").read_text().split("\n")
        tmpfs = any(line.split()[1:3] == [str(MEMORY), "tmpfs"] for line in mounts if line)
        return MEMORY if tmpfs and os.access(MEMORY, os.W_OK) and shutil.disk_usage(MEMORY).free >= ROOM else None
    except OSError:
        return None


def keep_clusters_in_memory() -> None:
    """As root: the embedded clusters (and the server's copy) under tmpfs."""
    memory = memory_dir()
    if os.geteuid() != 0 or memory is None or "LINECTL_EMBEDDED_PG_ROOT" in os.environ:
        return
    base = memory / "linectl-embedded-postgres"
    if base.exists() and (base.is_symlink() or base.stat().st_uid != 0):
        return
    os.environ["LINECTL_EMBEDDED_PG_ROOT"] = str(base)


def remove_clusters_linked_under(root: Path) -> list[Path]:
    """As root: delete every embedded cluster whose link (``<data dir>/pg``, named by
    its ``.source`` note) lies under ``root``, its server stopped first; the clusters
    deleted. Under a test session's own temporary directory they are the session's."""
    from shared.db.embedded import ROOT_BASE, EmbeddedPostgres  # after keep_clusters_in_memory()

    clusters = ROOT_BASE / "clusters"
    if os.geteuid() != 0 or not clusters.is_dir():
        return []
    root = root.absolute()
    removed = []
    for note in sorted(clusters.glob("*.source")):
        try:
            link = Path(note.read_text().strip())
        except OSError:
            continue
        if root not in link.parents or (link.exists() and not link.is_symlink()):
            continue
        server = EmbeddedPostgres(link)  # relocated to the cluster the note is of
        if server.pgdata.with_suffix(".source") != note:
            continue
        server.remove()
        removed.append(server.pgdata)
    return removed
