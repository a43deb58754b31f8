"""A nameko RPC and an event across two containers on the suite's transport
(the fixture ``nameko_config``): the ground every service test stands on."""

from nameko.standalone.rpc import ServiceRpcProxy
from nameko.testing.services import entrypoint_waiter

from tests.transport.nameko_services import Announcer, PoolListener


def test_rpc_and_event_between_containers(container_factory, nameko_config):
    announcer = container_factory(Announcer, nameko_config)
    listener = container_factory(PoolListener, nameko_config)
    announcer.start()
    listener.start()
    with entrypoint_waiter(listener, "on_announced", timeout=10):
        with ServiceRpcProxy("announcer", nameko_config, timeout=10) as proxy:
            assert proxy.announce("hi") == "hi"
    assert "hi" in PoolListener.seen
