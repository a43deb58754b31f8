"""The StreamHub's ordering rules, on socketpairs with a wsproto client and an
in-memory event log whose reads the test holds back: live frames that pile
up during a slow log read, a live frame that was never published, a relay
resync, and an overflow's resume point."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Ping, Pong, Request, TextMessage

from gateway.stream_hub import HubLimits, StreamHub

pytestmark = pytest.mark.timeout(30)


class Log:
    """The event log: frames by seq; ``hold`` makes reads wait until released."""

    def __init__(self):
        self.frames: list[dict] = []
        self.hold = threading.Event()
        self.hold.set()
        self.reading = threading.Event()

    def append(self, n: int) -> list[dict]:
        start = len(self.frames) + 1
        new = [{"seq": s, "txId": s, "type": "E", "at": "", "payload": {}} for s in range(start, start + n)]
        self.frames += new
        return new

    def read(self, after: int, limit: int) -> list[dict]:
        # What the log held when the read began (a transaction's snapshot), however late it ends.
        snapshot = [f for f in self.frames if f["seq"] > after][:limit]
        self.reading.set()
        self.hold.wait(10)
        return snapshot


class Client:
    """A websocket client on the far end of a socketpair."""

    def __init__(self, hub: StreamHub, after: int):
        near, self.sock = socket.socketpair()
        self.sock.settimeout(10)
        server, self.ws = WSConnection(ConnectionType.SERVER), WSConnection(ConnectionType.CLIENT)
        server.receive_data(self.ws.send(Request(host="x", target="/ws")))
        event = next(server.events())
        self.ws.receive_data(server.send(AcceptConnection()))
        assert isinstance(event, Request) and isinstance(next(self.ws.events()), AcceptConnection)
        assert hub.reserve()
        hub.adopt(near, server, after)
        self.closed_with = None

    def frames(self, until_seq: int | None = None, until_close: bool = False) -> list[dict]:
        out, text = [], ""
        while True:
            data = self.sock.recv(65536)
            if not data:
                return out
            self.ws.receive_data(data)
            for event in self.ws.events():
                if isinstance(event, TextMessage):
                    text += event.data
                    if event.message_finished:
                        out.append(json.loads(text))
                        text = ""
                elif isinstance(event, CloseConnection):
                    self.closed_with = event.code
                    return out
            if until_seq is not None and out and out[-1].get("seq") == until_seq and not until_close:
                return out


@pytest.fixture
def log():
    return Log()


@pytest.fixture
def hub(log):
    hub = StreamHub(log.read, HubLimits(queue_frames=5, ping_seconds=3600)).start()
    yield hub
    hub.stop()


def publish(hub, frames):
    hub.on_frames(frames)


def test_live_frames_that_pile_up_during_a_slow_read_are_not_lost(hub, log):
    log.append(3)
    log.hold.clear()  # the backlog read is slow
    client = Client(hub, after=0)
    for _ in range(4):  # 12 live frames while it reads: more than its queue of 5 holds
        publish(hub, log.append(3))
    log.hold.set()
    got = client.frames(until_seq=15)
    assert [f["seq"] for f in got] == list(range(1, 16))
    publish(hub, log.append(1))
    assert [f["seq"] for f in client.frames(until_seq=16)] == [16]


def test_a_frame_never_published_is_filled_from_the_log_in_order(hub, log):
    client = Client(hub, after=0)
    publish(hub, log.append(1))
    assert [f["seq"] for f in client.frames(until_seq=1)] == [1]
    log.append(2)  # committed, never published
    publish(hub, log.append(1))
    assert [f["seq"] for f in client.frames(until_seq=4)] == [2, 3, 4]


def test_after_a_resync_every_client_re_reads_the_log(hub, log):
    clients = [Client(hub, after=0) for _ in range(3)]
    publish(hub, log.append(1))
    for c in clients:
        assert [f["seq"] for f in c.frames(until_seq=1)] == [1]
    log.append(2)  # the relay was away: these were never delivered
    hub.on_resync()
    for c in clients:
        assert [f["seq"] for f in c.frames(until_seq=3)] == [2, 3]


def test_a_resync_during_a_slow_read_reads_again(hub, log):
    log.hold.clear()
    client = Client(hub, after=0)
    assert log.reading.wait(10)  # the read's snapshot is taken: the log was empty
    log.append(2)  # committed while the relay was away: never delivered
    hub.on_resync()
    log.hold.set()
    assert [f["seq"] for f in client.frames(until_seq=2)] == [1, 2]


def test_an_overflow_says_where_to_resume_and_everything_before_it_arrived(hub, log):
    told = []
    hub.on_overflow = lambda: told.append("overflow")  # what the gateway counts (a metric)
    client = Client(hub, after=0)
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    publish(hub, log.append(1))
    assert [f["seq"] for f in client.frames(until_seq=1)] == [1]
    blob = "x" * 200_000  # a few of these fill the socket buffers; the queue of 5 then overflows
    for _ in range(10):
        new = log.append(1)
        new[0]["payload"] = {"blob": blob}
        publish(hub, new)
    got = client.frames(until_close=True)
    assert got[-1]["type"] == "overflow" and client.closed_with == 1013
    assert told == ["overflow"]
    resume = got[-1]["resumeAfter"]
    assert [f["seq"] for f in got[:-1]] == list(range(2, resume + 1))


def test_a_client_flooding_pings_is_closed_before_it_costs_anything(log):
    # The send timeout is long: only the inbound budget can stop it.
    hub = StreamHub(log.read, HubLimits(send_timeout=60, ping_seconds=3600)).start()
    try:
        client = Client(hub, after=0)
        ping = client.ws.send(Ping(b"p" * 100))
        for _ in range(20_000):  # ~2 MB of pings: twice the burst a client may send
            client.sock.sendall(ping)
        client.frames(until_close=True)
        assert client.closed_with == 1008
    finally:
        hub.stop()


def test_pings_faster_than_the_client_reads_queue_one_pong(hub, log):
    client = Client(hub, after=0)
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    publish(hub, log.append(1))
    assert [f["seq"] for f in client.frames(until_seq=1)] == [1]
    big = log.append(1)
    big[0]["payload"] = {"blob": "x" * 1_000_000}  # more than the socket buffers: the queue waits
    publish(hub, big)
    for i in range(1000):
        client.sock.sendall(client.ws.send(Ping(str(i).encode())))
    pongs, text = [], ""
    while not pongs or pongs[-1] != b"999":
        client.ws.receive_data(client.sock.recv(65536))
        for event in client.ws.events():
            if isinstance(event, Pong):
                pongs.append(event.payload)
            elif isinstance(event, TextMessage):
                text += event.data
    assert json.loads(text)["seq"] == 2
    assert len(pongs) < 10 and pongs[-1] == b"999"  # the latest ping answered, not a thousand


def rss_kib() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_junk_after_a_close_is_dropped_unparsed(log):
    hub = StreamHub(log.read, HubLimits(send_timeout=60, ping_seconds=3600)).start()
    try:
        client = Client(hub, after=0)
        client.sock.sendall(client.ws.send(TextMessage("x" * 10_000)))  # too big: closed with 1009
        before = rss_kib()
        junk = bytes(range(256)) * 4096  # 1 MiB that is no websocket frame at all
        for _ in range(64):
            client.sock.sendall(junk)
        assert rss_kib() - before < 16 * 1024
        client.frames(until_close=True)
        assert client.closed_with == 1009
    finally:
        hub.stop()
