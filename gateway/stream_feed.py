"""Which frames each stream is sent, and in what order: the StreamHub's feed
(``gateway.stream_hub`` serves the sockets; this decides what goes in a
client's queue).

The ordering rule is the one the stream always had: a client's frames go out
strictly in seq order, ``seq <= last`` is a duplicate and dropped, a jump is
filled from the log first. A client is adopted by the hub before its backlog
is read, so every event is either in that read or arrives afterwards as a
live frame (kept in ``pending`` until the read is in).

* Each live event is encoded once (JSON, then the websocket frame) and the
  same bytes are queued to every client, so a thousand clients cost a
  thousand ``send`` calls per event, not a thousand encodings, and clients
  that lag by the same frames share their memory.
* Reading the event log (the backlog, a gap in the live feed, a resync after
  the relay reconnected) runs on a small thread pool and comes back to the
  hub as a message, so the hub's selector never waits on the database. A
  backlog is read a page at a time, the next page when the client's queue
  has room for it.

Everything here but the log reads runs on the hub thread, which owns every
client, so nothing locks."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from gateway import stream_client
from gateway.event_log import gap_before
from gateway.stream_client import HubLimits, StreamClient

log = logging.getLogger(__name__)

BACKLOG_PAGE = 500
ENCODED_CACHE = 20_000  # recent frames' wire bytes, shared by every client that reads them


class StreamFeed:
    """The frames of every client of one hub. ``post(item)`` hands a finished log
    read back to the hub thread (as ``("log_read", client, after, future)``);
    ``flush(client)`` writes what the client's queue holds."""

    def __init__(self, read_log, limits: HubLimits, post: Callable, flush: Callable[[StreamClient], None],
                 log_threads: int = 4):
        self._read_page = read_log  # (after, limit) -> [frame dict], ordered by seq
        self.limits = limits
        self._post = post
        self._flush = flush
        self._log_pool = ThreadPoolExecutor(log_threads, thread_name_prefix="stream-log")
        self._encoded: dict[int, bytes] = {}  # seq -> wire bytes; written by the hub thread only

    def stop(self) -> None:
        self._log_pool.shutdown(wait=False, cancel_futures=True)

    def live(self, clients: Iterable[StreamClient], frames: list[dict]) -> None:
        """The relay's live events (one transaction's frames, in seq order), to every client."""
        encoded = [(f["seq"], stream_client.encode(f)) for f in frames]
        for seq, data in encoded:
            self._remember(seq, data)
        for client in list(clients):
            for seq, data in encoded:
                self._offer(client, seq, data)
            self._flush(client)

    def resync(self, clients: Iterable[StreamClient]) -> None:
        """Events may have been missed: every client re-reads the log."""
        for client in list(clients):
            if client.reading_log:
                client.pending_lost = True
            else:
                self.read_log(client)

    def read_log(self, client: StreamClient) -> None:
        """Read the log after the client's last frame, on the pool; the live frames wait meanwhile."""
        client.reading_log = True
        client.more_log = False
        client.pending_lost = False
        after = client.last
        future = self._log_pool.submit(self._read_encoded, after)
        future.add_done_callback(lambda f: self._post(("log_read", client, after, f)))

    def log_read(self, client: StreamClient, after: int, future) -> None:
        """On the hub thread: a page of the log read for ``client`` is in."""
        if client.closed:
            return
        try:
            frames = future.result()
        except Exception:  # noqa: BLE001 - the database is away: the client resumes later
            log.warning("stream: reading the event log failed", exc_info=True)
            client.queue_close(stream_client.CLOSE_TRY_AGAIN_LATER, "event log unavailable; resume with ?after=")
            self._flush(client)
            return
        if frames and (gap := gap_before(frames[0][0], after)):
            client.enqueue(None, stream_client.encode({"type": "gap", **gap}), bounded=False)
        for seq, data in frames:
            self._remember(seq, data)
            if seq > client.last:
                # Not bounded like live frames: a page is read only when the queue has room.
                client.enqueue(seq, data, bounded=False)
        if client.closing:
            return
        if len(frames) == BACKLOG_PAGE:
            client.more_log = True  # read on when the queue has room (the hub's flush)
            self._flush(client)
            return
        self._after_log(client)
        self._flush(client)

    def _remember(self, seq: int, data: bytes) -> None:
        if seq not in self._encoded:
            self._encoded[seq] = data
            if len(self._encoded) > ENCODED_CACHE:
                del self._encoded[next(iter(self._encoded))]  # the oldest

    def _read_encoded(self, after: int) -> list[tuple[int, bytes]]:
        """On a pool thread: a page of the log as wire bytes (encoded here, off the
        hub thread, unless a client before already had them encoded)."""
        cached = self._encoded.get
        return [(f["seq"], cached(f["seq"]) or stream_client.encode(f)) for f in self._read_page(after, BACKLOG_PAGE)]

    def _after_log(self, client: StreamClient) -> None:
        """The log is read up to now: the frames that came live meanwhile follow, if they join up."""
        pending, client.pending = client.pending, []
        for i, (seq, data) in enumerate(pending):
            if seq <= client.last:
                continue
            if seq > client.last + 1:
                client.pending = pending[i:]
                self.read_log(client)  # a frame was never published: fill from the log
                return
            client.enqueue(seq, data)
            if client.closing:
                return
        if client.pending_lost:
            self.read_log(client)
            return
        client.reading_log = False

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
            client.enqueue(seq, data)
        else:
            client.pending.append((seq, data))
            self.read_log(client)
