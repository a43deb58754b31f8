"""The embedded server: first start initialises, a second start reuses the
running server, stop stops it, and a later start finds the data again."""

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
        EmbeddedPostgres(tmp_path / "pg").stop()


def test_the_session_server_answers(test_databases):
    assert _scalar(test_databases.server_url, "SELECT 1") == 1
