"""nameko on pgsql:// and on RabbitMQ: the same tests on both transports.

The RabbitMQ half skips locally when no broker answers (required in CI)."""

import os

import pytest
from nameko.exceptions import UnknownService
from nameko.standalone.rpc import ClusterRpcProxy, ServiceRpcProxy
from nameko.testing.services import entrypoint_waiter

from tests.support.waiting import wait_for
from tests.transport.nameko_services import (
    Announcer,
    BroadcastListener,
    Greeter,
    PoolListener,
)


@pytest.fixture(params=["pgsql", "rabbitmq"])
def transport_uri(request, db_url):
    if request.param == "pgsql":
        return "pgsql://" + db_url.split("://", 1)[1]
    return request.getfixturevalue("rabbit_uri")


@pytest.fixture
def config(transport_uri):
    # Fast sweeps so that a killed consumer's call comes back quickly on pgsql://.
    return {"AMQP_URI": transport_uri, "serializer": "json",
            "TRANSPORT_OPTIONS": {"polling_interval": 0.5}}


@pytest.fixture
def nameko_peer(peers):
    def start(uri, env=None):
        peer = peers(["-m", "tests.transport.nameko_peer", uri], env=env)
        peer.expect("ready")
        return peer

    return start


def test_rpc_between_processes(config, nameko_peer):
    nameko_peer(config["AMQP_URI"])
    with ServiceRpcProxy("greeter", config, timeout=30) as greeter:
        reply = greeter.hello("test")
    assert reply.startswith("hello test from ")
    assert reply != f"hello test from {os.getpid()}"


def test_rpc_to_an_unknown_service_fails_fast(config):
    with ClusterRpcProxy(config, timeout=30) as cluster:
        with pytest.raises(UnknownService):
            cluster.nobody_here.anything()


def test_events_reach_one_pool_member_and_every_broadcast_listener(config, container_factory):
    PoolListener.seen.clear()
    BroadcastListener.seen.clear()
    announcer = container_factory(Announcer, config)
    pool = [container_factory(PoolListener, config) for _ in range(2)]
    broadcast = [container_factory(BroadcastListener, config) for _ in range(2)]
    for container in [announcer, *pool, *broadcast]:
        container.start()
    with ServiceRpcProxy("announcer", config, timeout=30) as proxy:
        for value in range(4):
            proxy.announce(value)
    wait_for(lambda: sorted(BroadcastListener.seen) == sorted([0, 1, 2, 3] * 2), timeout=30)
    wait_for(lambda: sorted(PoolListener.seen) == [0, 1, 2, 3], timeout=30)


def test_a_call_whose_consumer_is_killed_is_redelivered(config, nameko_peer, container_factory):
    holder = nameko_peer(config["AMQP_URI"], env={"LINECTL_TEST_HOLD_WORK": "1"})
    with ServiceRpcProxy("greeter", config, timeout=30) as greeter:
        reply = greeter.work.call_async("job-1")
        assert holder.next_line() == "working job-1"
        holder.kill()
        survivor = container_factory(Greeter, config)
        survivor.start()
        with entrypoint_waiter(survivor, "work", timeout=30):
            pass
        assert reply.result() == f"done job-1 by {os.getpid()}"
