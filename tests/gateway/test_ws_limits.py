"""What an open websocket may cost the gateway, against a real served gateway:
no request thread, a per-process cap answered with 503 at once, a bound on
client messages, no permessage-deflate, a stalled reader cut off, and a
flooding client that leaves the gateway's memory where it was."""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from pathlib import Path

import pytest
import requests
import websocket

from tests.gateway.conftest import AUTH, OPERATOR
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(180)


def connect(base: str, after: int | None = None, **kwargs):
    url = base.replace("http://", "ws://") + "/ws" + ("" if after is None else f"?after={after}")
    return websocket.create_connection(url, header=[f"Authorization: Bearer {OPERATOR}"],
                                       timeout=10, **kwargs)


def open_streams(base: str) -> float:
    text = requests.get(base + "/metrics", timeout=10).text
    return next(float(line.split()[1]) for line in text.splitlines()
                if line.startswith("linectl_websocket_clients "))


def rss_kib(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_open_streams_hold_no_request_thread(gateway_server, events):
    served = gateway_server(threads=4)
    clients = [connect(served.base) for _ in range(40)]  # ten times the request threads
    try:
        started = time.monotonic()
        r = requests.get(served.base + "/api/work-orders", headers=AUTH, timeout=10)
        assert r.status_code == 200 and time.monotonic() - started < 5
        frame = events.write([("LIVE", {"n": 1})])[0]
        for ws in clients:
            assert json.loads(ws.recv()) == frame
        assert open_streams(served.base) == 40
    finally:
        for ws in clients:
            ws.close()


def test_a_stream_over_the_cap_is_refused_at_once_and_a_freed_slot_is_reused(gateway_server):
    served = gateway_server(LINECTL_WS_MAX_CLIENTS="3")
    clients = [connect(served.base) for _ in range(3)]
    try:
        started = time.monotonic()
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            connect(served.base)
        assert refused.value.status_code == 503 and time.monotonic() - started < 2
        assert json.loads(refused.value.resp_body)["error"]["code"] == "UNAVAILABLE"
        clients.pop().close()

        def accepted():
            try:
                clients.append(connect(served.base))
                return True
            except websocket.WebSocketBadStatusException:
                return False

        wait_for(accepted, 10, message="the freed slot to take a new stream")
        assert open_streams(served.base) == 3
    finally:
        for ws in clients:
            ws.close()


def test_client_messages_are_dropped_and_one_too_big_closes_with_1009(served_gateway, events):
    chatty, big = connect(served_gateway), connect(served_gateway)
    try:
        for i in range(50):
            chatty.send(f"hello {i} " + "x" * 1000)  # read and dropped
        chatty.ping(b"are you there")
        opcode, data = chatty.recv_data(control_frame=True)
        assert (opcode, data) == (websocket.ABNF.OPCODE_PONG, b"are you there")
        frame = events.write([("AFTER_CHATTER", {})])[0]
        assert json.loads(chatty.recv()) == frame

        big.send("x" * 10_000)
        opcode, data = big.recv_data(control_frame=True)
        while opcode != websocket.ABNF.OPCODE_CLOSE:  # a frame that was already on its way
            opcode, data = big.recv_data(control_frame=True)
        assert struct.unpack("!H", data[:2])[0] == 1009
    finally:
        chatty.close()
        big.close()


def test_permessage_deflate_is_never_negotiated(served_gateway):
    host, port = served_gateway.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall(("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                     "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
                     f"Authorization: Bearer {OPERATOR}\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += raw.recv(4096)
        assert head.startswith(b"HTTP/1.1 101")
        assert b"sec-websocket-extensions" not in head.lower()
        # A compressed frame (RSV1 set) is a protocol error, not something to inflate.
        raw.sendall(bytes((0xC1, 0x80 | 4)) + b"\0\0\0\0" + b"abcd")
        rest = b""
        while (chunk := raw.recv(4096)):
            rest += chunk
        close = rest[rest.index(b"\x88"):]
        assert struct.unpack("!H", close[2:4])[0] == 1002


def test_a_stalled_reader_is_cut_off_and_its_queue_freed(gateway_server, events):
    served = gateway_server(LINECTL_WS_SEND_TIMEOUT_SECONDS="1")
    stalled = connect(served.base, sockopt=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)])
    reader = connect(served.base)
    got = []

    def keep_reading():
        while len(got) < 300:
            got.append(json.loads(reader.recv()))

    keeping_up = threading.Thread(target=keep_reading, daemon=True)
    keeping_up.start()
    try:
        blob = "x" * 16_000
        for b in range(3):  # ~5 MB: more than the kernel's socket buffers hold
            events.write([("BIG", {"blob": blob, "b": b, "i": i}) for i in range(100)])
        # The stalled client never reads; the server does not wait on it for ever.
        wait_for(lambda: open_streams(served.base) == 1, 60, message="the stalled reader cut off")
        keeping_up.join(20)
        assert [f["payload"]["i"] for f in got] == list(range(100)) * 3  # the reader that keeps up misses nothing
    finally:
        stalled.close()
        reader.close()


def test_a_flooding_client_is_cut_off_costs_no_memory_and_others_keep_streaming(gateway_server, events):
    served = gateway_server()
    worker, = served.worker_pids()
    flood, watcher = connect(served.base), connect(served.base)
    try:
        before = rss_kib(worker)
        chunk, started = "y" * 4000, time.monotonic()
        with pytest.raises((websocket.WebSocketConnectionClosedException, OSError)):
            while time.monotonic() - started < 20:  # client messages, read and dropped, until cut off
                flood.send(chunk)
        assert time.monotonic() - started < 10  # its budget is 1 MiB, then 64 KiB/s
        frame = events.write([("DURING_FLOOD", {})])[0]
        assert json.loads(watcher.recv()) == frame
        assert rss_kib(worker) - before < 16 * 1024
    finally:
        flood.close()
        watcher.close()


def raw_handshake(base: str, *lines: str) -> tuple[int, bytes]:
    """A hand-written upgrade request (``lines`` replace the defaults they name); status, head+body."""
    host, port = base.removeprefix("http://").split(":")
    headers = {"Upgrade": "websocket", "Connection": "Upgrade",
               "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13",
               "Authorization": f"Bearer {OPERATOR}"}
    target = "/ws"
    for line in lines:
        if line.startswith("/ws"):
            target = line
            continue
        name, _, value = line.partition(":")
        if value:
            headers[name] = value.strip()
        else:
            headers.pop(name)
    request = f"GET {target} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    with socket.create_connection((host, int(port)), timeout=10) as raw:
        raw.sendall((request + "\r\n").encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += raw.recv(4096)
        if not answer.startswith(b"HTTP/1.1 101"):  # read the body (the connection stays open)
            head, _, body = answer.partition(b"\r\n\r\n")
            length = next(int(h.split(b":")[1]) for h in head.split(b"\r\n")
                          if h.lower().startswith(b"content-length:"))
            while len(body) < length:
                body += raw.recv(4096)
            answer = head + b"\r\n\r\n" + body
    return int(answer.split(b" ", 2)[1]), answer


def test_malformed_handshakes_are_refused_with_400_not_500(served_gateway, events):
    events.write([("ONE", {})])
    for line in ("Sec-WebSocket-Key", "Sec-WebSocket-Key: short", "Sec-WebSocket-Version",
                 "Sec-WebSocket-Version: 8", "Sec-WebSocket-Version: 13, 8", "Upgrade",
                 "/ws?after=%C2%B2", "/ws?after=999999"):
        status, answer = raw_handshake(served_gateway, line)
        assert status == 400, (line, answer)
        assert b'"VALIDATION_ERROR"' in answer, (line, answer)
    status, answer = raw_handshake(served_gateway, "Sec-WebSocket-Version: 8")
    assert b"sec-websocket-version: 13" in answer.lower()
    assert raw_handshake(served_gateway)[0] == 101


def test_streams_at_the_cap_and_a_flood_of_idle_connections_fit_the_open_file_limit(gateway_server):
    # 700 open files: 444 after the gateway's own; a third for HTTP connections, the rest streams.
    served = gateway_server(threads=16, open_files=700)
    worker, = served.worker_pids()
    streams = []
    while True:  # fill every stream slot
        try:
            streams.append(connect(served.base))
        except websocket.WebSocketBadStatusException as refused:
            assert refused.status_code == 503
            break
    assert 200 < len(streams) < 444
    fds = Path(f"/proc/{worker}/fd")
    counts = [len(list(fds.iterdir()))]
    idle = [socket.create_connection(("127.0.0.1", served.port)) for _ in range(400)]

    def accepted_all_it_will():  # the worker's fd count grew, then stopped growing
        counts.append(len(list(fds.iterdir())))  # (raises once the worker is gone)
        return counts[-1] > counts[0] and counts[-1] == counts[-2]

    try:
        wait_for(accepted_all_it_will, 30, 0.5, "the worker to accept what it will")
        assert served.worker_pids() == [worker]  # no accept() ran out of files and ended the worker
        for s in idle:
            s.close()
        wait_for(lambda: requests.get(served.base + "/healthz", timeout=10).ok, 60, message="healthz")
        assert served.worker_pids() == [worker]  # no accept() ran out of files and ended the worker
        streams.pop().close()
        wait_for(lambda: open_streams(served.base) == len(streams), 10, message="a slot freed")
    finally:
        for ws in streams:
            ws.close()
