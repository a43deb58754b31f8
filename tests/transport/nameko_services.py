"""Services of the nameko transport tests, shared by the test process and the
peer process (``nameko_peer``)."""

import os

import eventlet
from nameko.events import BROADCAST, EventDispatcher, event_handler
from nameko.rpc import rpc


class Greeter:
    name = "greeter"

    @rpc
    def hello(self, who):
        return f"hello {who} from {os.getpid()}"

    @rpc
    def work(self, job):
        if os.environ.get("LINECTL_TEST_HOLD_WORK"):
            # The peer announces the call and never finishes it: the test kills it.
            print(f"working {job}", flush=True)
            eventlet.sleep(3600)
        return f"done {job} by {os.getpid()}"


class Announcer:
    name = "announcer"
    dispatch = EventDispatcher()

    @rpc
    def announce(self, value):
        self.dispatch("announced", {"value": value})
        return value


class PoolListener:
    """Several instances share one queue: each event reaches one of them."""

    name = "pool_listener"
    seen = []

    @event_handler("announcer", "announced")
    def on_announced(self, payload):
        PoolListener.seen.append(payload["value"])


class BroadcastListener:
    """Every instance gets every event."""

    name = "broadcast_listener"
    seen = []

    @event_handler("announcer", "announced", handler_type=BROADCAST, reliable_delivery=False)
    def on_announced(self, payload):
        BroadcastListener.seen.append(payload["value"])
