"""Every kind of connection follows the primary (issue 40): the pool of an
engine, and the ``pgsql://`` transport's channels and LISTEN connection, on a
primary that is demoted (it turns read-only, as Patroni makes an old leader a
standby) while its standby is promoted. A pooled connection to the old server
is dropped at its first refused write, and the next one reaches the new primary;
nothing restarts."""

from __future__ import annotations

import psycopg2
import pytest
from nameko.exceptions import RpcTimeout
from nameko.rpc import rpc
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from shared.db.engine import make_engine
from shared.rpc import RpcClientPool
from tests.support.replica_pair import ReplicaPair


@pytest.fixture
def pair():
    p = ReplicaPair().start()
    yield p
    p.stop()


def demote_and_promote(pair: ReplicaPair) -> None:
    """The old primary keeps running but takes no more writes; the standby leads."""
    pair.demote()
    pair.promote()


def test_a_pool_drops_its_connections_to_a_demoted_server_and_writes_on_the_new_primary(pair):
    engine = make_engine(pair.url, pool_size=2)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE piece (id int PRIMARY KEY)"))
            conn.execute(text("INSERT INTO piece VALUES (1)"))
        demote_and_promote(pair)
        with pytest.raises(DBAPIError) as refused, engine.begin() as conn:
            conn.execute(text("INSERT INTO piece VALUES (2)"))
        assert refused.value.connection_invalidated  # what the gateway answers 503
        with engine.begin() as conn:  # a fresh connection, to the server that takes writes
            conn.execute(text("INSERT INTO piece VALUES (2)"))
            port = conn.execute(text("SELECT inet_server_port()")).scalar()
            ids = conn.execute(text("SELECT id FROM piece ORDER BY id")).scalars().all()
        assert (port, ids) == (pair.standby_port, [1, 2])
    finally:
        engine.dispose()


class Echo:
    name = "echo"

    @rpc
    def echo(self, value):
        return value


def test_rpc_over_pgsql_follows_the_new_primary(pair, container_factory):
    """The service's consumer reconnects by itself; a caller whose client met the
    demoted server gets an error and calls again, as the gateway and the loop do
    (with the same command id, so a command still runs once)."""
    from services.stack.migrate import upgrade

    upgrade(pair.url)  # the transport's tables
    config = {"AMQP_URI": "pgsql://" + pair.url.split("://", 1)[1], "serializer": "json"}
    container = container_factory(Echo, config)
    container.start()
    pool = RpcClientPool(config, size=2, timeout=10)
    try:
        with pool.client() as client:
            assert client.echo.echo(1) == 1
        demote_and_promote(pair)
        failures = []
        for _ in range(3):
            try:
                with pool.client() as client:
                    assert client.echo.echo(2) == 2
                break
            except (psycopg2.OperationalError, RpcTimeout, OSError) as exc:
                failures.append(exc)
        assert len(failures) <= 1, failures  # at most the call in flight is lost
        with pool.client() as client:
            assert client.echo.echo(3) == 3
        assert not container._died.ready()  # the same service, never restarted
    finally:
        pool.close()
