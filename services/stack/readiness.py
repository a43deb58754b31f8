"""``linectl up``'s word on the stack: ready, not ready (and why), ready again,
from the gateway's ``/readyz``."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request


def readiness(url: str, timeout: float = 3.0) -> tuple[bool, str]:
    """``GET url`` (the gateway's ``/readyz``): ready, or why not."""
    # Under TLS this is our own gateway, by an address its certificate may not name.
    context = ssl._create_unverified_context() if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as resp:
            return resp.status == 200, ""
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
            return False, message.removeprefix("not ready: ")  # said once, by linectl up
        except (ValueError, KeyError, TypeError):
            return False, f"HTTP {exc.code}"
    except OSError as exc:
        return False, f"gateway not answering ({exc.__class__.__name__})"


class ReadinessWatch:
    """Polls ``/readyz`` in a thread and says so when the stack becomes ready,
    stops being ready (naming what is down) and is ready again; ``on_ready``
    is called each time it becomes ready. A start that is not ready after
    ``patience`` seconds says why, and again whenever the reason changes: a
    stack that never comes up must not be silent about it."""

    def __init__(self, url: str, say, stopping, interval: float = 0.5, on_ready=None,
                 patience: float = 30.0):
        self.url = url
        self.patience = patience
        self.say = say
        self.stopping = stopping  # callable: true once the supervisor is stopping
        self.interval = interval
        self.on_ready = on_ready
        self.ready_once = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, name="readiness", daemon=True).start()

    def _run(self) -> None:
        ready, reason, told = False, None, None
        impatient_at = time.monotonic() + self.patience
        while not self.stopping():
            now_ready, why = readiness(self.url)
            if now_ready and not ready:
                self.say("ready" if not self.ready_once.is_set() else "ready again")
                self.ready_once.set()
                if self.on_ready is not None:
                    self.on_ready()
            elif not now_ready and (ready or (self.ready_once.is_set() and why != reason)):
                self.say(f"not ready: {why}")
            elif not now_ready and not self.ready_once.is_set() and why != told \
                    and time.monotonic() >= impatient_at:
                self.say(f"not ready yet: {why}")
                told = why
            ready, reason = now_ready, why
            time.sleep(self.interval if not ready else self.interval * 4)
