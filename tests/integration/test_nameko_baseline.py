"""A nameko RPC and an event across two containers on the suite's transport
(the fixture ``nameko_config``): the ground every service test stands on."""

from nameko.events import EventDispatcher, event_handler
from nameko.rpc import rpc
from nameko.standalone.rpc import ServiceRpcProxy
from nameko.testing.services import entrypoint_waiter


class Echo:
    name = "echo"
    dispatch = EventDispatcher()

    @rpc
    def echo(self, value):
        self.dispatch("echoed", {"value": value})
        return value


class Listener:
    name = "listener"
    seen = []

    @event_handler("echo", "echoed")
    def on_echoed(self, payload):
        Listener.seen.append(payload["value"])


def test_rpc_and_event_between_containers(container_factory, nameko_config):
    echo = container_factory(Echo, nameko_config)
    listener = container_factory(Listener, nameko_config)
    echo.start()
    listener.start()
    with entrypoint_waiter(listener, "on_echoed", timeout=10):
        with ServiceRpcProxy("echo", nameko_config, timeout=10) as proxy:
            assert proxy.echo("hi") == "hi"
    assert "hi" in Listener.seen
