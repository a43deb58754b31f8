"""The embedded server: first start initialises, a second start reuses the
running server, stop stops it, and a later start finds the data again."""

import os
import pwd
import shutil
import subprocess
import sys

import psycopg2
import pytest

from shared.db.embedded import EmbeddedPostgres
from tests.support.waiting import wait_for


def _scalar(url, sql):
    conn = psycopg2.connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
            return cur.fetchone()[0]
    finally:
        conn.close()


@pytest.mark.slow
def test_start_reuse_stop_and_restart_keeps_data(tmp_path):
    pg = EmbeddedPostgres(tmp_path / "pg", fast=True, max_connections=123)
    url = pg.start()
    try:
        assert pg.started_here
        assert _scalar(url, "SHOW max_connections") == "123"  # a plant bench's many lines need more
        conn = psycopg2.connect(url)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
        conn.close()

        # A second handle on the same directory reuses the running server.
        again = EmbeddedPostgres(tmp_path / "pg")
        assert again.start() == url
        assert not again.started_here

        pg.stop()
        assert pg.running_port() is None
        with pytest.raises(psycopg2.OperationalError):
            psycopg2.connect(url, connect_timeout=2)

        # Started again: same data.
        url2 = EmbeddedPostgres(tmp_path / "pg", port=pg.port).start()
        assert _scalar(url2, "SELECT v FROM kept") == 42
    finally:
        EmbeddedPostgres(tmp_path / "pg").remove()


def test_the_session_server_answers(test_databases):
    assert _scalar(test_databases.server_url, "SELECT 1") == 1


@pytest.mark.slow
def test_tcp_login_needs_the_generated_password(tmp_path):
    pg = EmbeddedPostgres(tmp_path / "pg", fast=True)
    url = pg.start()
    try:
        assert ":" in url.split("@")[0].split("//")[1]  # the URL carries the password
        assert (tmp_path / "pg.password").stat().st_mode & 0o777 == 0o600
        for user in ("postgres", "linectl_gateway", "nobody"):
            with pytest.raises(psycopg2.OperationalError, match="password"):
                psycopg2.connect(host="127.0.0.1", port=pg.port, user=user, dbname="postgres",
                                 connect_timeout=5)
        with pytest.raises(psycopg2.OperationalError, match="password authentication failed"):
            psycopg2.connect(host="127.0.0.1", port=pg.port, user="postgres", password="guess-1234",
                             dbname="postgres", connect_timeout=5)
        assert _scalar(url, "SELECT current_user") == "postgres"
    finally:
        pg.remove()


@pytest.mark.slow
def test_a_cluster_made_with_trust_auth_is_secured_on_start(tmp_path):
    pg = EmbeddedPostgres(tmp_path / "pg", fast=True)
    pg._prepare_dirs()
    pg._run([pg._bin("initdb"), "-D", str(pg.pgdata), "-U", "postgres", "--auth=trust",
             "--encoding=UTF8", "--locale=C", "--no-instructions"], timeout=120)
    pg.start()
    try:
        with pytest.raises(psycopg2.OperationalError, match="password"):
            psycopg2.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="postgres",
                             connect_timeout=5)
    finally:
        pg.remove()


def test_printed_urls_mask_the_password():
    from shared.config import mask_url

    assert mask_url("postgresql://postgres:s3cret@127.0.0.1:5432/linectl") == \
        "postgresql://postgres:***@127.0.0.1:5432/linectl"
    assert mask_url("postgresql://postgres@127.0.0.1:5432/linectl") == "postgresql://postgres@127.0.0.1:5432/linectl"


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="root mode: the server runs as embedded_postgres")
def test_root_mode_changes_no_mode_of_the_callers_directories(tmp_path):
    private = tmp_path / "home"
    private.mkdir(mode=0o700)
    private.chmod(0o700)
    before = {p: p.stat().st_mode for p in (tmp_path, private)}
    pg = EmbeddedPostgres(private / "var" / "pg", fast=True)
    url = pg.start()
    try:
        assert _scalar(url, "SELECT 1") == 1
        assert {p: p.stat().st_mode for p in before} == before  # nothing widened
        assert (private / "var" / "pg").is_symlink()
        real = (private / "var" / "pg").resolve()
        assert real.stat().st_uid == pwd.getpwnam("embedded_postgres").pw_uid
        assert real.stat().st_mode & 0o777 == 0o700
    finally:
        pg.remove()
    assert not real.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="clusters are relocated (and pruned) only when run as root")
def test_a_cluster_being_created_is_never_pruned_by_another_process(tmp_path, monkeypatch):
    """Another process's prune_orphans() may run at any step of this one's
    _prepare_dirs(); here it runs as the link to the new cluster is made (the
    step that came after the ``.source`` note, when a CI run lost a cluster)."""
    pg = EmbeddedPostgres(tmp_path / "pg", fast=True)
    assert pg.relocated
    real_symlink_to = type(tmp_path).symlink_to

    def pruned_then_linked(path, target, target_is_directory=False):
        EmbeddedPostgres.prune_orphans()  # the other process, at this very moment
        return real_symlink_to(path, target, target_is_directory)

    monkeypatch.setattr(type(tmp_path), "symlink_to", pruned_then_linked)
    try:
        pg._prepare_dirs()
        assert pg.pgdata.is_dir() and (tmp_path / "pg").resolve() == pg.pgdata.resolve()
    finally:
        monkeypatch.undo()
        pg.remove()


@pytest.mark.skipif(os.geteuid() != 0, reason="creates a system user: root only")
def test_the_server_user_is_created_once_when_many_processes_start_at_once(tmp_path):
    """On a fresh machine the suite's shards all start a server at once; a ``useradd``
    started while another one is creating the user fails (exit 9: it exists)."""
    # A useradd that takes its time, so the racers overlap however they are scheduled.
    slow = tmp_path / "useradd"
    slow.write_text(f"#!/bin/sh\nsleep 0.3\nexec {shutil.which('useradd')} \"$@\"\n")
    slow.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}

    name = f"linectl_t{os.getpid()}"
    # Each racer imports first, then waits for the word to go, so they run useradd together.
    racer = ("import sys; from shared.db.embedded import ensure_system_user; "
             "print('ready', flush=True); sys.stdin.read(1); ensure_system_user(sys.argv[1])")
    try:
        procs = [subprocess.Popen([sys.executable, "-c", racer, name], env=env, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
        assert [proc.stdout.readline() for proc in procs] == ["ready\n"] * 8
        for proc in procs:
            proc.stdin.write("go")
            proc.stdin.close()
        failures = [p.stderr.read() for p in procs if p.wait(timeout=60) != 0]
        assert failures == []
        assert pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="clusters are relocated (and pruned) only when run as root")
def test_a_start_deletes_the_clusters_whose_data_directory_is_gone_and_no_other(tmp_path):
    """Issue 56: deleting the data directory left its cluster for good once its server
    had died without a clean stop (a stale postmaster.pid), or when the next start
    reused a running server. Kept: a cluster with its data directory, one whose server
    runs, and one linectl did not make (no note)."""
    import secrets
    import signal

    from shared.db.embedded import ROOT_BASE

    live, crashed, running = (tmp_path / name / "var" for name in ("live", "crashed", "running"))
    unmarked = ROOT_BASE / "clusters" / f"made-by-someone-else-{secrets.token_hex(4)}"
    unmarked.mkdir(parents=True)
    servers = {d: EmbeddedPostgres(d / "pg", fast=True) for d in (live, crashed, running)}
    try:
        for server in servers.values():
            server.start()
        cluster = {d: servers[d].pgdata for d in servers}
        postmaster = int((cluster[crashed] / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGKILL)  # a crash, or a reboot: its postmaster.pid stays
        wait_for(lambda: not os.path.exists(f"/proc/{postmaster}"), 10, message="the killed server gone")
        shutil.rmtree(crashed.parent)
        shutil.rmtree(running.parent)  # deleted under a running server

        EmbeddedPostgres(live / "pg").start()  # another start (reusing the running server)

        assert not cluster[crashed].exists() and not cluster[crashed].with_suffix(".source").exists()
        assert cluster[live].is_dir() and (live / "pg").resolve() == cluster[live].resolve()
        assert cluster[running].is_dir()  # its server runs: never deleted under it
        assert unmarked.is_dir()
        assert _scalar(servers[live].url("postgres"), "SELECT 1") == 1
    finally:
        for server in servers.values():
            server.remove()
        unmarked.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="clusters are relocated (and removed apart) only when run as root")
def test_the_suite_removes_the_clusters_of_its_own_temporary_directory(tmp_path):
    """What tests/conftest.py does as the session ends, with the session's base
    temporary directory: its clusters go (a running one stopped first), others stay."""
    from tests.support.cluster_storage import remove_clusters_linked_under

    session, elsewhere = tmp_path / "session", tmp_path / "elsewhere"
    running = EmbeddedPostgres(session / "a" / "var" / "pg", fast=True)
    idle = EmbeddedPostgres(session / "b" / "var" / "pg", fast=True)
    other = EmbeddedPostgres(elsewhere / "var" / "pg", fast=True)
    try:
        running.start()
        idle._prepare_dirs()
        other._prepare_dirs()
        assert sorted(remove_clusters_linked_under(session)) == sorted([running.pgdata, idle.pgdata])
        assert running.running_port() is None and not running.pgdata.exists() and not idle.pgdata.exists()
        assert other.pgdata.is_dir() and (elsewhere / "var" / "pg").resolve() == other.pgdata.resolve()
    finally:
        for server in (running, idle, other):
            server.remove()
