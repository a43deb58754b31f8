"""The StreamHub: one thread per gateway process serves every open websocket.

flask-sock does the handshake on a request thread (``gateway.ws``); the route
then hands the connection (its socket and its wsproto state) to the hub and
returns, so an open stream holds no request thread. The hub multiplexes all
streams with one selector: it adopts them, writes what their queues hold,
reads what they send, pings them, closes the stalled and the revoked, and
forgets the gone.

* Sends never block, and what a client sends is read and dropped within
  limits (``gateway.stream_client``: its queue, its bounds, its closes).
* What goes in a client's queue, and in what order (the live feed, the
  backlog, gaps, resyncs), is the feed's (``gateway.stream_feed``); the hub
  thread runs it, so a client is only ever touched by that thread.
"""

from __future__ import annotations

import collections
import logging
import selectors
import socket
import struct
import threading
import time

from wsproto.events import Ping

from gateway import stream_client
from gateway.stream_client import HubLimits, StreamClient
from gateway.stream_feed import StreamFeed

log = logging.getLogger(__name__)

RECV_BYTES = 65536
KERNEL_SEND_BUFFER = 256 * 1024
FLUSH_BYTES = 256 * 1024  # per writev
FLUSH_FRAMES = 256
TICK_SECONDS = 0.5
CLOSE_LINGER = 1.0  # after our close frame and FIN, the client's EOF is awaited this long


class StreamSlots:
    """The streams a gateway process may hold open: each costs a file descriptor,
    and the process has one open-file room, however many lines' hubs share it."""

    def __init__(self, max_clients: int):
        self.max_clients = max_clients
        self._taken = 0
        self._lock = threading.Lock()

    def reserve(self) -> bool:
        with self._lock:
            if self._taken >= self.max_clients:
                return False
            self._taken += 1
            return True

    def release(self) -> None:
        with self._lock:
            self._taken -= 1

    @property
    def taken(self) -> int:
        return self._taken


class StreamHub:
    """Serves every websocket of one line's stream in a gateway process from one
    thread. ``slots``: the cap it shares with the other lines' hubs (its own
    ``limits.max_clients`` without)."""

    def __init__(self, read_log, limits: HubLimits = HubLimits(), *, on_count=None,
                 on_fanout=None, on_overflow=None, authorised=None, log_threads: int = 4,
                 slots: StreamSlots | None = None):
        self.limits = limits
        self.slots = slots or StreamSlots(limits.max_clients)
        # credential -> still accepted? Asked on the hub thread when a stream is
        # adopted, so a token revoked between the handshake and the adoption is
        # caught there (a later revocation comes as revoke()).
        self.authorised = authorised or (lambda credential: True)
        self.on_count = on_count or (lambda n: None)  # open streams, after each change
        self.on_fanout = on_fanout or (lambda s: None)  # seconds from the relay to every socket
        self.on_overflow = on_overflow or (lambda: None)  # a stream told it fell too far behind
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._inbox: collections.deque = collections.deque()
        self._clients: set[StreamClient] = set()
        # read_log: (after, limit) -> [frame dict], ordered by seq
        self.feed = StreamFeed(read_log, limits, self._post, self._flush, log_threads)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream-hub", daemon=True)
        self._next_ping = time.monotonic() + limits.ping_seconds
        self._next_timers = 0.0

    # -- called from other threads -------------------------------------------

    def start(self) -> StreamHub:
        self._thread.start()
        return self

    def reserve(self) -> bool:
        """Take a stream slot before the handshake; False at the cap."""
        return self.slots.reserve()

    def release(self) -> None:
        self.slots.release()

    @property
    def open_streams(self) -> int:
        """Streams open or being opened, on every hub sharing the slots."""
        return self.slots.taken

    def adopt(self, sock: socket.socket, conn, after: int, credential=None) -> None:
        """Take over a handshaken websocket (its slot was reserved) streaming from
        ``after``; ``credential`` names the token it was opened with."""
        self._post(("adopt", sock, conn, after, credential))

    def revoke(self, credentials) -> None:
        """Close (4401) every stream opened with one of these credentials."""
        self._post(("revoke", frozenset(credentials)))

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
        self.feed.stop()

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
            client.queue_close(stream_client.CLOSE_GOING_AWAY, "the gateway is stopping")
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

    def _on_adopt(self, sock, conn, after: int, credential=None) -> None:
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
                              inbound_budget=self.limits.inbound_burst, inbound_at=now,
                              limits=self.limits, credential=credential, on_overflow=self.on_overflow)
        try:
            self._selector.register(sock, selectors.EVENT_READ, client)
        except (ValueError, OSError):
            sock.close()
            self.release()
            return
        self._clients.add(client)
        self.on_count(len(self._clients))
        if not self.authorised(credential):
            client.revoke()
            self._flush(client)
            return
        self.feed.read_log(client)

    def _on_revoke(self, credentials: frozenset) -> None:
        for client in list(self._clients):
            if client.credential in credentials and not client.closing:
                client.revoke()
                self._flush(client)

    def _on_frames(self, frames: list[dict], posted: float) -> None:
        self.feed.live(self._clients, frames)
        self.on_fanout(time.monotonic() - posted)

    def _on_resync(self) -> None:
        self.feed.resync(self._clients)

    def _on_log_read(self, client: StreamClient, after: int, future) -> None:
        self.feed.log_read(client, after, future)

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
            n = self._socket_call(client, client.sock.sendmsg, bufs)
            if n is None:
                if client.closed:
                    return
                break
            client.progress_at = time.monotonic()
            client.out_bytes -= n
            client.consume(n)
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
        if client.more_log and not client.closing and client.has_room():
            self.feed.read_log(client)
        want_write = bool(client.out)
        if want_write != client.watching_write:  # one epoll_ctl per change, not per flush
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
            try:
                self._selector.modify(client.sock, events, client)
            except (ValueError, KeyError, OSError):
                self._drop(client)
                return
            client.watching_write = want_write

    def _socket_call(self, client: StreamClient, call, arg):
        """``call(arg)`` on the client's socket: None when it would block, or when the
        socket failed (the client is dropped then)."""
        try:
            return call(arg)
        except BlockingIOError:
            return None
        except OSError:
            self._drop(client)
            return None

    def _read(self, client: StreamClient) -> None:
        data = self._socket_call(client, client.sock.recv, RECV_BYTES)
        if data is None or client.closed:
            return
        if not data:
            self._drop(client)
            return
        if client.closing:
            return  # its last words are dropped unparsed: nothing buffers them
        if client.receive(data):
            self._flush(client)

    def _check_timers(self, now: float) -> None:
        ping = now >= self._next_ping
        if ping:
            self._next_ping = now + self.limits.ping_seconds
        for client in list(self._clients):
            if client.deadline is not None and now >= client.deadline:
                self._drop(client, abort=True)  # a close that was never read: cut off
            elif client.out and not client.closing and now - client.progress_at >= self.limits.send_timeout:
                client.overflow()  # a stalled reader
                self._flush(client)
            elif ping and not client.closing:
                if client.pong_due:
                    client.queue_close(1008, "ping not answered")
                else:
                    client.pong_due = True
                    client.queue_control(Ping())
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
