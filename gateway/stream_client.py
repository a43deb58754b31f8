"""One websocket stream's side of the StreamHub (``gateway.stream_hub``): the
wire encoding of a frame, the limits, and a client's outgoing queue (bounded;
overflow, close, one pong for many pings) and what it does with the bytes the
client sends. The hub thread owns every client, so nothing here locks.

* Sends never block. A client's queue is bounded (``queue_frames`` frames,
  ``buffer_bytes`` bytes); one that falls behind, or makes no progress for
  ``send_timeout`` seconds, gets ``{"type": "overflow", "resumeAfter": seq}``
  and a close (1013), and is cut off after one more ``send_timeout`` if it
  still reads nothing. Its queue goes with it.
* Client data is read and dropped; a message over ``max_message_bytes`` closes
  the socket with 1009, and a client sending more than 16 such messages a
  second (a burst of 256) with 1008. permessage-deflate is never negotiated
  (``gateway.ws`` strips the offer), so nothing is inflated. Pings are
  answered, one pong for however many pings wait; the hub pings every
  ``ping_seconds`` and closes a client that did not answer the last one."""

from __future__ import annotations

import collections
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage
from wsproto.utilities import LocalProtocolError

from shared.config import Settings

CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN_LATER = 1013
INBOUND_MESSAGES_PER_SECOND = 16  # x max_message_bytes: 64 KiB/s at the default
INBOUND_BURST_MESSAGES = 256  # x max_message_bytes: 1 MiB at the default
CLOSE_POLICY_VIOLATION = 1008
# The token the stream was opened with is revoked (4000-4999: the application's
# own codes; 4401 mirrors HTTP 401). A client reconnects only with another token.
CLOSE_TOKEN_REVOKED = 4401


def text_frame(payload: bytes) -> bytes:
    """One unmasked, unfragmented text frame (RFC 6455 §5.2), as a server sends it."""
    n = len(payload)
    if n < 126:
        header = bytes((0x81, n))
    elif n < 65536:
        header = bytes((0x81, 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x81, 127)) + n.to_bytes(8, "big")
    return header + payload


def encode(frame: dict) -> bytes:
    return text_frame(json.dumps(frame).encode())


@dataclass(frozen=True)
class HubLimits:
    max_clients: int = 1000
    # The settings' defaults (LINECTL_WS_*); gateway.context passes the values set.
    max_message_bytes: int = Settings.ws_max_message_bytes
    send_timeout: float = Settings.ws_send_timeout_seconds
    queue_frames: int = 1000
    buffer_bytes: int = 8 * 1024 * 1024
    ping_seconds: float = 20.0

    # What a client may send: the stream reads nothing but pings and a close,
    # so a client sending more than this is abusing it (and the hub's CPU).
    @property
    def inbound_rate(self) -> float:
        return self.max_message_bytes * INBOUND_MESSAGES_PER_SECOND

    @property
    def inbound_burst(self) -> float:
        return self.max_message_bytes * INBOUND_BURST_MESSAGES


@dataclass(eq=False)
class StreamClient:
    """One open websocket, owned by the hub thread (no locking needed)."""
    sock: socket.socket
    conn: object  # wsproto.WSConnection, past the handshake
    last: int  # the last seq queued to this client
    limits: HubLimits
    out: collections.deque = field(default_factory=collections.deque)  # [seq | None, bytes]
    out_bytes: int = 0
    out_frames: int = 0
    head_sent: int = 0  # bytes of out[0] already written
    sent_seq: int = 0  # the last seq written in full
    progress_at: float = 0.0  # last time a send made progress (or the queue was empty)
    reading_log: bool = True  # a log read is in flight or due; live frames wait in pending
    more_log: bool = False  # the last page was full: read on once the queue drains
    pending: list = field(default_factory=list)  # [(seq, bytes)] live frames during a log read
    pending_lost: bool = False  # pending overflowed: read the log once more at the end
    closing: bool = False  # a close frame is queued; nothing else is
    wrote_eof: bool = False
    deadline: float | None = None  # cut off at this time (closing, or a stalled reader)
    message_bytes: int = 0  # size so far of the client message being received
    inbound_budget: float = 0.0  # bytes the client may still send now (refilled over time)
    inbound_at: float = 0.0
    pong: list | None = None  # the queued, unsent pong: one answers the latest ping
    pong_due: bool = False
    watching_write: bool = False
    closed: bool = False
    credential: object = None  # the token's key (gateway.tokens.token_key), for revocation
    on_overflow: Callable[[], None] = lambda: None  # told it fell too far behind (a metric)

    def enqueue(self, seq: int | None, data: bytes, bounded: bool = True) -> None:
        if self.closing:
            return
        if not self.out:
            self.progress_at = time.monotonic()
        self.out.append([seq, data])
        self.out_bytes += len(data)
        if seq is not None:
            self.last = seq
            self.out_frames += 1
        # Control frames count too: a client flooding pings while reading nothing
        # must not grow its queue of pongs without bound.
        if bounded and (self.out_frames > self.limits.queue_frames
                        or self.out_bytes > self.limits.buffer_bytes):
            self.overflow()

    def overflow(self) -> None:
        """Too far behind: drop what is not on the wire, tell it where to resume, close."""
        if self.closing:
            return
        self.on_overflow()
        resume = self._drop_unsent()
        self.last = resume
        self.enqueue(None, encode({"type": "overflow", "resumeAfter": resume}))
        self.queue_close(CLOSE_TRY_AGAIN_LATER, "too far behind; resume with ?after=")

    def revoke(self) -> None:
        """Its token was revoked: nothing more is sent but the close."""
        if self.closing:
            return
        self._drop_unsent()
        self.queue_close(CLOSE_TOKEN_REVOKED, "token revoked")

    def _drop_unsent(self) -> int:
        """Drop every queued frame not yet on the wire; the seq the client will have read."""
        resume = self.sent_seq
        kept = collections.deque()
        if self.out and self.head_sent:
            head = self.out[0]  # half written: finish it, or the stream breaks
            kept.append(head)
            if head[0] is not None:
                resume = head[0]
        self.out = kept
        if self.pong is not None and not any(e is self.pong for e in kept):
            self.pong = None
        self.out_bytes = sum(len(d) for _, d in kept) - self.head_sent
        self.out_frames = len(kept)
        self.pending.clear()
        return resume

    def queue_close(self, code: int, reason: str) -> None:
        self.queue_close_frame(CloseConnection(code=code, reason=reason))

    def queue_close_frame(self, close: CloseConnection) -> None:
        """Queue a close (ours, or the answer to the client's); nothing follows it."""
        if self.closing or self.closed:
            return
        try:
            data = self.conn.send(close)
        except LocalProtocolError:
            data = b""
        if data:
            self.out.append([None, data])
            self.out_bytes += len(data)
        self.closing = True
        self.deadline = time.monotonic() + self.limits.send_timeout

    def queue_control(self, event) -> None:
        if self.closing:
            return
        try:
            data = self.conn.send(event)
        except LocalProtocolError:
            return
        self.enqueue(None, data)

    def queue_pong(self, ping: Ping) -> None:
        """Answer a ping; a pong still waiting is answered by this one instead
        (RFC 6455 5.5.3: the latest ping is the one to answer), so pings sent
        faster than the client reads queue one pong, not one each."""
        if self.closing:
            return
        try:
            data = self.conn.send(ping.response())
        except LocalProtocolError:
            return
        entry = self.pong
        if entry is not None and not (self.head_sent and self.out and self.out[0] is entry):
            self.out_bytes += len(data) - len(entry[1])
            entry[1] = data
            return
        self.pong = [None, data]
        if not self.out:
            self.progress_at = time.monotonic()
        self.out.append(self.pong)
        self.out_bytes += len(data)

    def consume(self, n: int) -> None:
        """``n`` bytes from the head of the queue are on the wire."""
        while n:
            head = self.out[0]
            left = len(head[1]) - self.head_sent
            if n < left:
                self.head_sent += n
                return
            n -= left
            self.out.popleft()
            self.head_sent = 0
            if head is self.pong:
                self.pong = None
            if head[0] is not None:
                self.sent_seq = head[0]
                self.out_frames -= 1

    def has_room(self) -> bool:
        """Room for another page of the log: the queue is under half of both bounds."""
        return (self.out_frames < self.limits.queue_frames // 2
                and self.out_bytes < self.limits.buffer_bytes // 2)

    def receive(self, data: bytes) -> bool:
        """What the client sent: pings are answered, a close is answered, messages
        are read and dropped within their size; too much data closes the stream.
        False when the connection is closed on the protocol level (nothing to flush)."""
        now = time.monotonic()
        self.inbound_budget = min(self.limits.inbound_burst, self.inbound_budget
                                  + (now - self.inbound_at) * self.limits.inbound_rate)
        self.inbound_at = now
        self.inbound_budget -= len(data)
        if self.inbound_budget < 0:
            self.queue_close(CLOSE_POLICY_VIOLATION, "too much client data")
            return True
        try:
            self.conn.receive_data(data)
        except LocalProtocolError:
            return False  # the socket follows
        for event in self.conn.events():
            if isinstance(event, Ping):
                self.queue_pong(event)
            elif isinstance(event, Pong):
                self.pong_due = False
            elif isinstance(event, CloseConnection):
                self.queue_close_frame(event.response())
                break
            elif isinstance(event, (TextMessage, BytesMessage)):
                # The stream takes no client messages: read and dropped, within a size.
                self.message_bytes += len(event.data)
                if self.message_bytes > self.limits.max_message_bytes:
                    self.queue_close(CLOSE_TOO_BIG, "client messages are limited to "
                                     f"{self.limits.max_message_bytes} bytes")
                    break
                if event.message_finished:
                    self.message_bytes = 0
        return True
