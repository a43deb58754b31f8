"""``linectl up``'s word on readiness: a start that never gets ready says why
(once per reason) instead of saying nothing until someone gives up on it."""

import json
import queue
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from services.stack.readiness import ReadinessWatch


class Readyz(BaseHTTPRequestHandler):
    reason = "not ready: line cell-b: loop not answering"  # as /readyz says it; None: ready

    def do_GET(self):
        if Readyz.reason is None:
            body, status = b"{}", 200
        else:
            body, status = json.dumps({"error": {"code": "UNAVAILABLE", "message": Readyz.reason}}).encode(), 503
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_start_not_ready_past_its_patience_says_why_once_per_reason_then_ready():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Readyz)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    said, stop = queue.Queue(), threading.Event()
    watch = ReadinessWatch(f"http://127.0.0.1:{server.server_port}/readyz", said.put, stop.is_set,
                           interval=0.02, patience=0.2)
    try:
        watch.start()
        assert said.get(timeout=10) == "not ready yet: line cell-b: loop not answering"  # not twice "not ready"
        Readyz.reason = "the PLC of cell-b is not connected"
        assert said.get(timeout=10) == "not ready yet: the PLC of cell-b is not connected"
        Readyz.reason = None
        assert said.get(timeout=10) == "ready"
        assert said.empty()  # the same reason was never said twice
    finally:
        stop.set()
        server.shutdown()
