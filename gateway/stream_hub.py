"""The StreamHub: one thread per gateway process serves every open websocket.

flask-sock does the handshake on a request thread (``gateway.ws``); the route
then hands the connection (its socket and its wsproto state) to the hub and
returns, so an open stream holds no request thread. The hub multiplexes all
streams with one selector:

* Each live event is encoded once (JSON, then the websocket frame) and the
  same bytes are queued to every client, so a thousand clients cost a
  thousand ``send`` calls per event, not a thousand encodings, and clients
  that lag by the same frames share their memory.
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
  ``ping_seconds`` and closes a client that did not answer the last one.
* Reading the event log (the backlog, a gap in the live feed, a resync after
  the relay reconnected) runs on a small thread pool and comes back to the
  hub as a message, so the selector never waits on the database.

The ordering rule is the one the stream always had: a client's frames go out
strictly in seq order, ``seq <= last`` is a duplicate and dropped, a jump is
filled from the log first. A client is adopted by the hub before its backlog
is read, so every event is either in that read or arrives afterwards as a
live frame (kept in ``pending`` until the read is in).
"""

from __future__ import annotations

import collections
import json
import logging
import selectors
import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage
from wsproto.utilities import LocalProtocolError

log = logging.getLogger(__name__)

BACKLOG_PAGE = 500
CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_TRY_AGAIN_LATER = 1013
RECV_BYTES = 65536
KERNEL_SEND_BUFFER = 256 * 1024
FLUSH_BYTES = 256 * 1024  # per writev
FLUSH_FRAMES = 256
ENCODED_CACHE = 20_000  # recent frames' wire bytes, shared by every client that reads them
INBOUND_MESSAGES_PER_SECOND = 16  # x max_message_bytes: 64 KiB/s at the default
INBOUND_BURST_MESSAGES = 256  # x max_message_bytes: 1 MiB at the default
CLOSE_POLICY_VIOLATION = 1008
TICK_SECONDS = 0.5
CLOSE_LINGER = 1.0  # after our close frame and FIN, the client's EOF is awaited this long


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


def gap_before(first_seq: int, last: int) -> dict | None:
    """The events a client missed between ``last`` and the first one the log still
    has: seq is gapless, so a jump means retention purged them."""
    if first_seq > last + 1:
        return {"from": last + 1, "to": first_seq - 1}
    return None


def encode(frame: dict) -> bytes:
    return text_frame(json.dumps(frame).encode())


@dataclass(frozen=True)
class HubLimits:
    max_clients: int = 1000
    max_message_bytes: int = 4096
    send_timeout: float = 10.0
    queue_frames: int = 1000
    buffer_bytes: int = 8 * 1024 * 1024
    ping_seconds: float = 20.0


@dataclass(eq=False)
class StreamClient:
    """One open websocket, owned by the hub thread (no locking needed)."""
    sock: socket.socket
    conn: object  # wsproto.WSConnection, past the handshake
    last: int  # the last seq queued to this client
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


class StreamHub:
    """Serves every websocket of one gateway process from one thread."""

    def __init__(self, read_log, limits: HubLimits = HubLimits(), *, on_count=None,
                 on_fanout=None, log_threads: int = 4):
        self.read_log = read_log  # (after, limit) -> [frame dict], ordered by seq
        self.limits = limits
        self.on_count = on_count or (lambda n: None)  # open streams, after each change
        self.on_fanout = on_fanout or (lambda s: None)  # seconds from the relay to every socket
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._inbox: collections.deque = collections.deque()
        self._clients: set[StreamClient] = set()
        self._slots = 0
        self._slots_lock = threading.Lock()
        self._log_pool = ThreadPoolExecutor(log_threads, thread_name_prefix="stream-log")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-hub", daemon=True)
        self._next_ping = time.monotonic() + limits.ping_seconds
        self._next_timers = 0.0
        self._encoded: dict[int, bytes] = {}  # seq -> wire bytes; written by the hub thread only
        # What a client may send: the stream reads nothing but pings and a close,
        # so a client sending more than this is abusing it (and the hub's CPU).
        self._inbound_rate = limits.max_message_bytes * INBOUND_MESSAGES_PER_SECOND
        self._inbound_burst = limits.max_message_bytes * INBOUND_BURST_MESSAGES

    # -- called from other threads -------------------------------------------

    def start(self) -> StreamHub:
        self._thread.start()
        return self

    def reserve(self) -> bool:
        """Take a stream slot before the handshake; False at the cap."""
        with self._slots_lock:
            if self._slots >= self.limits.max_clients:
                return False
            self._slots += 1
            return True

    def release(self) -> None:
        with self._slots_lock:
            self._slots -= 1

    @property
    def open_streams(self) -> int:
        return self._slots

    def adopt(self, sock: socket.socket, conn, after: int) -> None:
        """Take over a handshaken websocket (its slot was reserved) streaming from ``after``."""
        self._post(("adopt", sock, conn, after))

    def on_frames(self, frames: list[dict]) -> None:
        """The relay's live events (one transaction's frames, in seq order)."""
        self._post(("frames", frames, time.monotonic()))

    def on_resync(self) -> None:
        """The relay reconnected: events may have been missed; every client re-reads the log."""
        self._post(("resync",))

    def stop(self) -> None:
        self._stop.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        self._log_pool.shutdown(wait=False, cancel_futures=True)

    def _post(self, item) -> None:
        self._inbox.append(item)
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except (BlockingIOError, OSError):
            pass  # already awake (the buffer is full) or stopping

    # -- the hub thread ---------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._turn()
            except Exception:  # noqa: BLE001 - the hub must outlive any one client's fault
                log.exception("stream hub: unexpected error; continuing")
        for client in list(self._clients):
            self._queue_close(client, CLOSE_GOING_AWAY, "the gateway is stopping")
            self._flush(client)
            self._drop(client)

    def _turn(self) -> None:
        for key, mask in self._selector.select(TICK_SECONDS):
            client = key.data
            if client is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
                continue
            if client.closed:
                continue
            if mask & selectors.EVENT_READ:
                self._read(client)
            if mask & selectors.EVENT_WRITE and not client.closed:
                self._flush(client)
        while self._inbox:
            item = self._inbox.popleft()
            getattr(self, "_on_" + item[0])(*item[1:])
        now = time.monotonic()
        if now >= self._next_timers:  # at most once a tick, however busy the feed
            self._next_timers = now + TICK_SECONDS
            self._check_timers(now)

    def _on_adopt(self, sock, conn, after: int) -> None:
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # A fixed kernel send buffer: autotuning would let each stalled reader
            # park up to 4 MiB in the kernel before its queue here even starts.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, KERNEL_SEND_BUFFER)
        except OSError:
            pass
        now = time.monotonic()
        client = StreamClient(sock=sock, conn=conn, last=after, sent_seq=after, progress_at=now,
                              inbound_budget=self._inbound_burst, inbound_at=now)
        try:
            self._selector.register(sock, selectors.EVENT_READ, client)
        except (ValueError, OSError):
            sock.close()
            self.release()
            return
        self._clients.add(client)
        self.on_count(len(self._clients))
        self._read_log(client)

    def _remember(self, seq: int, data: bytes) -> None:
        if seq not in self._encoded:
            self._encoded[seq] = data
            if len(self._encoded) > ENCODED_CACHE:
                del self._encoded[next(iter(self._encoded))]  # the oldest

    def _read_encoded(self, after: int) -> list[tuple[int, bytes]]:
        """On a pool thread: a page of the log as wire bytes (encoded here, off the
        hub thread, unless a client before already had them encoded)."""
        cached = self._encoded.get
        return [(f["seq"], cached(f["seq"]) or encode(f)) for f in self.read_log(after, BACKLOG_PAGE)]

    def _on_frames(self, frames: list[dict], posted: float) -> None:
        encoded = [(f["seq"], encode(f)) for f in frames]
        for seq, data in encoded:
            self._remember(seq, data)
        for client in list(self._clients):
            for seq, data in encoded:
                self._offer(client, seq, data)
            self._flush(client)
        self.on_fanout(time.monotonic() - posted)

    def _on_resync(self) -> None:
        for client in list(self._clients):
            if client.reading_log:
                client.pending_lost = True
            else:
                self._read_log(client)

    def _on_log_read(self, client: StreamClient, after: int, future) -> None:
        if client.closed:
            return
        try:
            frames = future.result()
        except Exception:  # noqa: BLE001 - the database is away: the client resumes later
            log.warning("stream: reading the event log failed", exc_info=True)
            self._queue_close(client, CLOSE_TRY_AGAIN_LATER, "event log unavailable; resume with ?after=")
            self._flush(client)
            return
        if frames and (gap := gap_before(frames[0][0], after)):
            self._enqueue(client, None, encode({"type": "gap", **gap}), bounded=False)
        for seq, data in frames:
            self._remember(seq, data)
            if seq > client.last:
                # Not bounded like live frames: a page is read only when the queue has room.
                self._enqueue(client, seq, data, bounded=False)
        if client.closing:
            return
        if len(frames) == BACKLOG_PAGE:
            client.more_log = True  # read on when the queue has room (see _flush)
            self._flush(client)
            return
        self._after_log(client)
        self._flush(client)

    def _after_log(self, client: StreamClient) -> None:
        """The log is read up to now: the frames that came live meanwhile follow, if they join up."""
        pending, client.pending = client.pending, []
        for i, (seq, data) in enumerate(pending):
            if seq <= client.last:
                continue
            if seq > client.last + 1:
                client.pending = pending[i:]
                self._read_log(client)  # a frame was never published: fill from the log
                return
            self._enqueue(client, seq, data)
            if client.closing:
                return
        if client.pending_lost:
            self._read_log(client)
            return
        client.reading_log = False

    def _read_log(self, client: StreamClient) -> None:
        client.reading_log = True
        client.more_log = False
        client.pending_lost = False
        after = client.last
        future = self._log_pool.submit(self._read_encoded, after)
        future.add_done_callback(lambda f: self._post(("log_read", client, after, f)))

    def _offer(self, client: StreamClient, seq: int, data: bytes) -> None:
        """A live frame for this client."""
        if client.closing or seq <= client.last and not client.reading_log:
            return
        if client.reading_log:
            if len(client.pending) >= self.limits.queue_frames:
                client.pending.clear()
                client.pending_lost = True  # the log still has them all
            client.pending.append((seq, data))
        elif seq == client.last + 1:
            self._enqueue(client, seq, data)
        else:
            client.pending.append((seq, data))
            self._read_log(client)

    def _enqueue(self, client: StreamClient, seq: int | None, data: bytes, bounded: bool = True) -> None:
        if client.closing:
            return
        if not client.out:
            client.progress_at = time.monotonic()
        client.out.append([seq, data])
        client.out_bytes += len(data)
        if seq is not None:
            client.last = seq
            client.out_frames += 1
        # Control frames count too: a client flooding pings while reading nothing
        # must not grow its queue of pongs without bound.
        if bounded and (client.out_frames > self.limits.queue_frames
                        or client.out_bytes > self.limits.buffer_bytes):
            self._overflow(client)

    def _overflow(self, client: StreamClient) -> None:
        """Too far behind: drop what is not on the wire, tell it where to resume, close."""
        if client.closing:
            return
        resume = client.sent_seq
        kept = collections.deque()
        if client.out and client.head_sent:
            head = client.out[0]  # half written: finish it, or the stream breaks
            kept.append(head)
            if head[0] is not None:
                resume = head[0]
        client.out = kept
        if client.pong is not None and not any(e is client.pong for e in kept):
            client.pong = None
        client.out_bytes = sum(len(d) for _, d in kept) - client.head_sent
        client.out_frames = len(kept)
        client.pending.clear()
        client.last = resume
        self._enqueue(client, None, encode({"type": "overflow", "resumeAfter": resume}))
        self._queue_close(client, CLOSE_TRY_AGAIN_LATER, "too far behind; resume with ?after=")

    def _queue_close(self, client: StreamClient, code: int, reason: str) -> None:
        self._queue_close_frame(client, CloseConnection(code=code, reason=reason))

    def _queue_close_frame(self, client: StreamClient, close: CloseConnection) -> None:
        """Queue a close (ours, or the answer to the client's); nothing follows it."""
        if client.closing or client.closed:
            return
        try:
            data = client.conn.send(close)
        except LocalProtocolError:
            data = b""
        if data:
            client.out.append([None, data])
            client.out_bytes += len(data)
        client.closing = True
        client.deadline = time.monotonic() + self.limits.send_timeout

    def _queue_control(self, client: StreamClient, event) -> None:
        if client.closing:
            return
        try:
            data = client.conn.send(event)
        except LocalProtocolError:
            return
        self._enqueue(client, None, data)

    def _queue_pong(self, client: StreamClient, ping: Ping) -> None:
        """Answer a ping; a pong still waiting is answered by this one instead
        (RFC 6455 5.5.3: the latest ping is the one to answer), so pings sent
        faster than the client reads queue one pong, not one each."""
        if client.closing:
            return
        try:
            data = client.conn.send(ping.response())
        except LocalProtocolError:
            return
        entry = client.pong
        if entry is not None and not (client.head_sent and client.out and client.out[0] is entry):
            client.out_bytes += len(data) - len(entry[1])
            entry[1] = data
            return
        client.pong = [None, data]
        if not client.out:
            client.progress_at = time.monotonic()
        client.out.append(client.pong)
        client.out_bytes += len(data)

    def _flush(self, client: StreamClient) -> None:
        """Write what the socket takes now; watch for writability if more is left."""
        if client.closed:
            return
        while client.out:
            # Many queued frames in one writev: a backlog page is a few syscalls, not 500.
            bufs, total = [], 0
            for entry in client.out:
                view = memoryview(entry[1])[client.head_sent:] if not bufs else entry[1]
                bufs.append(view)
                total += len(view)
                if total >= FLUSH_BYTES or len(bufs) >= FLUSH_FRAMES:
                    break
            try:
                n = client.sock.sendmsg(bufs)
            except BlockingIOError:
                break
            except OSError:
                self._drop(client)
                return
            client.progress_at = time.monotonic()
            client.out_bytes -= n
            self._consume(client, n)
            if n < total:
                break  # the socket is full; EVENT_WRITE brings us back
        if client.closing and not client.out and not client.wrote_eof:
            client.wrote_eof = True
            try:
                client.sock.shutdown(socket.SHUT_WR)  # FIN after the close frame; read until EOF
            except OSError:
                self._drop(client)
                return
            # Everything is on the wire: a client that does not hang up soon is not going to.
            client.deadline = min(client.deadline or float("inf"), time.monotonic() + CLOSE_LINGER)
        if client.more_log and not client.closing and self._has_room(client):
            self._read_log(client)
        want_write = bool(client.out)
        if want_write != client.watching_write:  # one epoll_ctl per change, not per flush
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
            try:
                self._selector.modify(client.sock, events, client)
            except (ValueError, KeyError, OSError):
                self._drop(client)
                return
            client.watching_write = want_write

    def _consume(self, client: StreamClient, n: int) -> None:
        """``n`` bytes from the head of the queue are on the wire."""
        while n:
            head = client.out[0]
            left = len(head[1]) - client.head_sent
            if n < left:
                client.head_sent += n
                return
            n -= left
            client.out.popleft()
            client.head_sent = 0
            if head is client.pong:
                client.pong = None
            if head[0] is not None:
                client.sent_seq = head[0]
                client.out_frames -= 1

    def _has_room(self, client: StreamClient) -> bool:
        """Room for another page of the log: the queue is under half of both bounds."""
        return (client.out_frames < self.limits.queue_frames // 2
                and client.out_bytes < self.limits.buffer_bytes // 2)

    def _read(self, client: StreamClient) -> None:
        try:
            data = client.sock.recv(RECV_BYTES)
        except BlockingIOError:
            return
        except OSError:
            self._drop(client)
            return
        if not data:
            self._drop(client)
            return
        if client.closing:
            return  # its last words are dropped unparsed: nothing buffers them
        now = time.monotonic()
        client.inbound_budget = min(self._inbound_burst, client.inbound_budget
                                    + (now - client.inbound_at) * self._inbound_rate)
        client.inbound_at = now
        client.inbound_budget -= len(data)
        if client.inbound_budget < 0:
            self._queue_close(client, CLOSE_POLICY_VIOLATION, "too much client data")
            self._flush(client)
            return
        try:
            client.conn.receive_data(data)
        except LocalProtocolError:
            return  # the connection is closed on the protocol level; the socket follows
        for event in client.conn.events():
            if isinstance(event, Ping):
                self._queue_pong(client, event)
            elif isinstance(event, Pong):
                client.pong_due = False
            elif isinstance(event, CloseConnection):
                self._queue_close_frame(client, event.response())
                break
            elif isinstance(event, (TextMessage, BytesMessage)):
                # The stream takes no client messages: read and dropped, within a size.
                client.message_bytes += len(event.data)
                if client.message_bytes > self.limits.max_message_bytes:
                    self._queue_close(client, CLOSE_TOO_BIG, "client messages are limited to "
                                      f"{self.limits.max_message_bytes} bytes")
                    break
                if event.message_finished:
                    client.message_bytes = 0
        self._flush(client)

    def _check_timers(self, now: float) -> None:
        ping = now >= self._next_ping
        if ping:
            self._next_ping = now + self.limits.ping_seconds
        for client in list(self._clients):
            if client.deadline is not None and now >= client.deadline:
                self._drop(client, abort=True)  # a close that was never read: cut off
            elif client.out and not client.closing and now - client.progress_at >= self.limits.send_timeout:
                self._overflow(client)  # a stalled reader
                self._flush(client)
            elif ping and not client.closing:
                if client.pong_due:
                    self._queue_close(client, 1008, "ping not answered")
                else:
                    client.pong_due = True
                    self._queue_control(client, Ping())
                self._flush(client)

    def _drop(self, client: StreamClient, abort: bool = False) -> None:
        """Forget a client. ``abort``: reset the connection, so the kernel frees what
        it still holds for a reader that takes nothing (a plain close would keep
        the unsent bytes, retrying into a zero window, for minutes)."""
        if client.closed:
            return
        client.closed = True
        if abort:
            try:
                client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        client.out.clear()
        client.pending = []
        try:
            self._selector.unregister(client.sock)
        except (KeyError, ValueError, OSError):
            pass
        try:
            client.sock.close()
        except OSError:
            pass
        self._clients.discard(client)
        self.release()
        self.on_count(len(self._clients))
