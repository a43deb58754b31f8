"""Where the embedded PostgreSQL keeps its clusters when run as root, and how
the clusters of deleted data directories are found and deleted.

PostgreSQL refuses to run as root: the server then runs as a system user, with
its cluster under :data:`ROOT_BASE` and a symlink at the data directory's
``pg``. Each cluster has a ``clusters/<id>.source`` note naming that link, so a
cluster whose link is gone (its data directory deleted) is known to be linectl's
and unreachable, and :func:`prune_orphan_clusters` deletes it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import pwd
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

ROOT_BASE = Path(os.environ.get("LINECTL_EMBEDDED_PG_ROOT", "/var/lib/linectl-embedded-postgres"))


def ensure_system_user(name: str) -> None:
    """Create the system user ``name`` unless it exists. Several processes may start
    a server at once (the suite's shards on a fresh machine): a ``useradd`` started
    while another creates the user fails (exit 9), so the check and the creation are
    made under a lock of our own."""
    with open(root_base() / ".system-user.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            pwd.getpwnam(name)
        except KeyError:
            subprocess.run(["useradd", "-s", "/bin/bash", name], check=True, capture_output=True, text=True)


def root_base() -> Path:
    """ROOT_BASE, made if need be: root-owned, readable by the server's user."""
    ROOT_BASE.mkdir(parents=True, exist_ok=True)
    ROOT_BASE.chmod(0o755)
    return ROOT_BASE


def server_runs(cluster: Path) -> bool:
    """Whether a server may run on ``cluster``: its ``postmaster.pid`` names a live
    ``postgres`` process. A file a dead server left (``kill -9``, a reboot) does not
    count; one that cannot be read does (in doubt, a cluster is kept)."""
    try:
        first = (cluster / "postmaster.pid").read_text().split("\n", 1)[0]
    except FileNotFoundError:
        return False
    except OSError:
        return True
    try:
        pid = int(first)
        os.kill(pid, 0)
    except ValueError:
        return True  # being written: a server starting
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # the pid of a server that died, taken since by another program
        return "postgres" in Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return True


def prune_orphan_clusters() -> None:
    """Delete relocated clusters whose symlink is gone (their data directory was
    deleted) and whose server is not running; they can never be reached again.
    A cluster without its ``.source`` note is not one linectl made: it stays."""
    clusters = ROOT_BASE / "clusters"
    if not clusters.is_dir():
        return
    for cluster in clusters.iterdir():
        if not cluster.is_dir():
            continue
        try:
            source = Path(cluster.with_suffix(".source").read_text().strip())
        except OSError:
            continue
        try:
            points_here = source.is_symlink() and source.resolve() == cluster.resolve()
        except OSError:
            points_here = False
        if not points_here and not server_runs(cluster):
            log.info("deleting the embedded PostgreSQL cluster %s: its data directory %s is gone",
                 cluster, source.parent)
            shutil.rmtree(cluster, ignore_errors=True)
            cluster.with_suffix(".source").unlink(missing_ok=True)
