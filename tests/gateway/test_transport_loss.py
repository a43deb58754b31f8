"""A command whose RPC loses the transport while it waits for its reply (issue 56:
a failover's 500): the answer is 503 ``UNAVAILABLE``, the next command succeeds,
and no client with a broken reply consumer stays in the pool. On ``pgsql://`` the
reply consumer's PostgreSQL session is ended (``pg_terminate_backend``, as a
failover ends it); on RabbitMQ its socket is shut down (what a broker's crash or
a cut cable leaves the client with)."""

from __future__ import annotations

import socket
import threading

import psycopg2
import pytest

from gateway.app import create_app
from gateway.context import gateway_context
from shared.config import load_settings
from tests.gateway.conftest import AUTH
from tests.gateway.standin import StandInHardware, StandInLineController
from tests.support.db import admin_execute
from tests.support.waiting import wait_for

ORDER = {"productId": "BRACKET-A", "quantity": 1}


@pytest.fixture(params=["pgsql", "rabbitmq"])
def transport_uri(request, amqp_uri):
    return amqp_uri if request.param == "pgsql" else request.getfixturevalue("rabbit_uri")


@pytest.fixture
def gateway(transport_uri, container_factory, nameko_config, gateway_env, writable):
    config = {**nameko_config, "AMQP_URI": transport_uri}
    container_factory(StandInLineController, config).start()
    container_factory(StandInHardware, config).start()
    app = create_app(load_settings({**gateway_env, "LINECTL_AMQP_URI": transport_uri}))
    yield app
    StandInLineController.on_command = None
    gateway_context(app).close()


def reply_consumers(app) -> list:
    """The reply consumers of the command clients the pool has made (lent or idle)."""
    pool = gateway_context(app).default_line.rpc_pool()
    return [proxy._reply_listener.queue_consumer for proxy in list(pool._all)]


def drop_connection(consumer, db_url: str) -> None:
    """End the reply consumer's connection from outside, as the transport going away does."""
    channel = consumer.consumer.channel
    backend = getattr(channel, "_backend", None)
    if backend is not None:  # pgsql://: the channel's and the process's listening sessions
        listener = consumer.connection.transport._listener
        pids = [int(backend[0]), int(listener._backend[0])]
        admin_execute(db_url, f"SELECT pg_terminate_backend(pid) FROM unnest(ARRAY{pids}) pid")
    else:  # py-amqp: the connection's socket
        consumer.connection.connection.sock.shutdown(socket.SHUT_RDWR)


def usable(consumer) -> bool:
    return not consumer.stopped and consumer.connection.connected


def all_pooled_clients_answer(app) -> bool:
    """Every client idle in the pool makes a call: none is left broken."""
    pool = gateway_context(app).default_line.rpc_pool()
    idle = list(pool._idle.queue)
    assert idle and len(idle) == len(pool._all)
    return all(cluster.line_controller.status()["lastSeq"] >= 0 for _proxy, cluster in idle)


def test_a_reply_consumer_lost_while_a_command_waits_answers_503_and_the_next_command_succeeds(
        gateway, db_url, transport_uri):
    """On pgsql:// the reply was lost with the session (a direct reply goes to a live
    consumer only): 503. RabbitMQ's reply queue outlives the connection and nameko's
    client consumes it again on a new one: the command's own answer."""
    client = gateway.test_client()
    dropped = []

    def drop_the_callers_reply_connections():
        for consumer in reply_consumers(gateway):
            if usable(consumer):
                drop_connection(consumer, db_url)
                dropped.append(consumer)

    StandInLineController.on_command = drop_the_callers_reply_connections
    r = client.post("/api/work-orders", json=ORDER, headers=AUTH)
    assert dropped, "no reply consumer was dropped"
    if transport_uri.startswith("pgsql://"):
        assert r.status_code == 503, r.get_json()
        assert r.get_json()["error"]["code"] == "UNAVAILABLE"
    else:
        assert r.status_code == 201, r.get_json()

    StandInLineController.on_command = None
    r = client.post("/api/work-orders", json=ORDER, headers=AUTH)
    assert r.status_code == 201, r.get_json()
    assert all_pooled_clients_answer(gateway)


def test_an_outage_while_a_command_is_published_answers_503_not_500(amqp_uri, gateway_env, standin, db_url):
    """What a failover did (issue 56): the transport's database went away after the
    pool lent a client (its check passed) and before the reply was awaited; the publish
    went through on a new session, and nameko's wait found the reply consumer's
    connection gone (``RuntimeError: This consumer has been disconnected``: a 500)."""
    app = create_app(load_settings(gateway_env))
    client = app.test_client()
    try:
        assert client.post("/api/work-orders", json=ORDER, headers=AUTH).status_code == 201  # a pooled client
        (consumer,) = reply_consumers(app)
        listener = consumer.connection.transport._listener
        losses = listener.losses
        held = psycopg2.connect(db_url)
        answers = []
        try:
            with held.cursor() as cur:  # the next publish waits here, as on a server going away
                cur.execute("BEGIN; LOCK TABLE mq_message IN SHARE MODE")
            sender = threading.Thread(
                target=lambda: answers.append(client.post("/api/work-orders", json=ORDER, headers=AUTH)))
            sender.start()
            wait_for(lambda: publish_waiting(db_url), 10, message="the command's publish to wait on the lock")
            drop_connection(consumer, db_url)
            wait_for(lambda: listener.losses > losses, 10, message="the listener to see its session end")
        finally:
            held.rollback()
            held.close()
        sender.join(30)
        (r,) = answers
        assert r.status_code == 503, r.get_json()
        assert r.get_json()["error"]["code"] == "UNAVAILABLE"
        r = client.post("/api/work-orders", json=ORDER, headers=AUTH)
        assert r.status_code == 201, r.get_json()
        assert all_pooled_clients_answer(app)
    finally:
        gateway_context(app).close()


def publish_waiting(db_url: str) -> bool:
    conn = psycopg2.connect(db_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                        " AND wait_event_type = 'Lock' AND query LIKE '%mq_publish%'")
            return cur.fetchone()[0] > 0
    finally:
        conn.close()
