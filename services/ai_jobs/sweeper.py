"""``ExpirySweeper``: expire AI leases and execution timeouts even when no
runtime calls in.

Every queue operation applies due expiry first, so correctness never waits on
the sweeper; it only makes expiry visible on time. Each gateway process runs
one. Many at once are safe: ``expire_due`` picks due rows ``FOR UPDATE SKIP
LOCKED`` and re-checks them in the same statement, so each expiry happens in
exactly one process, and a sweep that loses the race simply finds nothing.
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)

SWEEP_INTERVAL_SECONDS = 1.0


class ExpirySweeper:
    def __init__(self, queue, interval: float = SWEEP_INTERVAL_SECONDS):
        self.queue = queue
        self.interval = interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sweep_once(self) -> list[dict]:
        expired = self.queue.expire_due()
        for item in expired:
            log.info("AI job %s expired (%s): %s -> %s", item["jobId"], item["errorCode"],
                     item["from"], item["to"])
        return expired

    def start(self) -> ExpirySweeper:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="ai-expiry-sweeper", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sweep_once()
            except Exception:  # noqa: BLE001 - the database may be away; try again next interval
                log.warning("AI expiry sweep failed; retrying in %.1fs", self.interval, exc_info=True)
