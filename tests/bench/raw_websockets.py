"""Raw websocket clients for the gateway's load bench: a handshake on a plain
socket, masked client frames, and one selector thread reading every client's
frames (a thread per client would measure the bench, not the gateway)."""

from __future__ import annotations

import base64
import os
import re
import selectors
import socket
import struct
import threading
import time

SEQ = re.compile(rb'^\{"seq": (\d+)')


class Client(socket.socket):
    rest = b""  # bytes that came after the handshake's response


def handshake(port: int, token: str, after: int | None = None, rcvbuf: int | None = None):
    """A websocket handshake on a raw socket; the socket, or the HTTP status it was refused with."""
    sock = Client()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    query = "" if after is None else f"?after={after}"
    sock.sendall((f"GET /ws{query} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                  f"Authorization: Bearer {token}\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed during the handshake")
        head += chunk
    status = int(head.split(b" ", 2)[1])
    if status != 101:
        sock.close()
        return status
    sock.rest = head.split(b"\r\n\r\n", 1)[1]
    return sock


def masked(opcode: int, payload: bytes) -> bytes:
    mask = os.urandom(4)
    n = len(payload)
    head = bytes((0x80 | opcode,)) + (bytes((0x80 | n,)) if n < 126 else
                                       bytes((0x80 | 126,)) + struct.pack("!H", n) if n < 65536 else
                                       bytes((0x80 | 127,)) + struct.pack("!Q", n))
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


class Readers:
    """Many websocket clients on one selector thread: parses server frames,
    records each event frame's arrival time and answers pings."""

    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.arrivals: dict[int, list[float]] = {}
        self.clients = 0
        self.closed = 0
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def add(self, sock) -> None:
        """Before start(): the selector is the reading thread's alone after that."""
        sock.setblocking(False)
        self.sel.register(sock, selectors.EVENT_READ, bytearray(sock.rest))
        self.clients += 1

    def start(self) -> None:
        self.thread.start()

    def _run(self):
        while not self._stop:
            for key, _ in self.sel.select(0.05):
                try:
                    data = key.fileobj.recv(262144)
                except BlockingIOError:
                    continue
                except OSError:
                    data = b""
                now = time.time()
                if not data:
                    self.sel.unregister(key.fileobj)
                    self.closed += 1
                    continue
                buf = key.data
                buf += data
                self._frames(key.fileobj, buf, now)

    def _frames(self, sock, buf: bytearray, now: float):
        while len(buf) >= 2:
            opcode, n, i = buf[0] & 0x0F, buf[1] & 0x7F, 2
            if n == 126:
                if len(buf) < 4:
                    return
                n, i = struct.unpack("!H", buf[2:4])[0], 4
            elif n == 127:
                if len(buf) < 10:
                    return
                n, i = struct.unpack("!Q", buf[2:10])[0], 10
            if len(buf) < i + n:
                return
            payload = bytes(buf[i:i + n])
            del buf[:i + n]
            if opcode == 0x1:
                found = SEQ.search(payload, 0, 64)  # frames start with their seq: no full decode
                if found:
                    self.arrivals.setdefault(int(found.group(1)), []).append(now)
            elif opcode == 0x9:
                try:
                    sock.send(masked(0xA, payload))
                except OSError:
                    pass

    def stop(self):
        self._stop = True
        self.thread.join(5)
