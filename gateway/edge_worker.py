"""The gateway's gunicorn worker: gthread, with two changes.

SIGHUP re-reads the tokens file (``GatewayServer.reread_tokens``) from the
worker's signal set-up on. gunicorn's own set-up leaves SIGHUP at its default,
which ends the process, and a worker still loading its app (seconds on a busy
machine) would die of the operator's SIGHUP if the handler came any later.

A new connection holds a request thread for at most ``FIRST_BYTES_WAIT``
while its first bytes come; after that it waits on the worker's poller,
holding no thread, and is served when they come. (gunicorn holds the thread
for 5 s: as many idle connections as there are threads, a browser's
speculative ones or a careless client's, would stall every request for that
long.)

And what gunicorn refuses itself
(before any app code runs) is answered in the JSON error envelope instead of
gunicorn's HTML page.

gunicorn reads the request line and headers within fixed bounds
(``gateway.errors.REQUEST_LIMITS``) and refuses a request beyond them, or one
it cannot parse, before the app sees it. Those bounds stay: raising them would not let
the app see a 10 KB path (gunicorn caps the request line at 8190 bytes, or
reads it without any bound), and a request the parser refuses never becomes a
WSGI request. Only the answer changes: the same status gunicorn would give
(414, 431, 400, 501, …), with ``{"error": {"code", "message"}}``, mapped by
``gateway.errors.request_refusal`` (as is such an error met while a view reads
a body). Faults on the server's side keep gunicorn's own handling.
"""

from __future__ import annotations

import json
import signal

from gunicorn import util
from gunicorn.workers.gthread import _DEFER, ThreadWorker

from gateway.errors import envelope, request_refusal


def refusal_response(status: int, reason: str, code: str, message: str) -> bytes:
    body = json.dumps(envelope(code, message)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nX-Content-Type-Options: nosniff\r\n\r\n")
    return head.encode("latin-1") + body


# A client sends its request right after it connects; a LAN round trip is a
# few milliseconds. Longer, and the connection waits on the poller instead.
FIRST_BYTES_WAIT = 0.2


class EnvelopeWorker(ThreadWorker):
    def handle(self, conn):
        if not conn.initialized and not conn.data_ready and not conn.wait_for_data(FIRST_BYTES_WAIT):
            return _DEFER  # to the poller, which hands it back when its bytes come
        return super().handle(conn)

    def init_signals(self):
        reread = getattr(self.app, "reread_tokens", None)  # the gateway's GatewayServer
        if reread is None:
            return super().init_signals()
        # gunicorn's set-up resets SIGHUP to its default (exit) first: held back
        # until the handler is in place, a SIGHUP in between is not fatal but handled.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            super().init_signals()
            signal.signal(signal.SIGHUP, lambda _signum, _frame: reread())
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        return None

    def handle_error(self, req, client, addr, exc):
        refused = request_refusal(exc)
        if refused is None:
            return super().handle_error(req, client, addr, exc)
        # The kind only: gunicorn's text may quote a header, a token among them.
        self.log.warning("refused a request from %s: %s", (addr or ("",))[0], type(exc).__name__)
        try:
            util.write_nonblock(client, refusal_response(*refused))
        except Exception:  # noqa: BLE001 - the client may be gone; the connection closes anyway
            self.log.debug("could not send the refusal")
        return None
