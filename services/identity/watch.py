"""Ended sessions, seen by every gateway process within a poll: a sign-out,
a disabled user or a new password (made by any process, ``linectl users``
included) closes that session's websockets (4401) here too."""

from __future__ import annotations

import logging
import threading

from services.identity.sessions import SessionStore

log = logging.getLogger(__name__)
POLL_SECONDS = 0.25
SESSION_CREDENTIAL = b"session:"


def session_credential(key: str) -> bytes:
    """What a websocket opened with a session keeps, beside token keys (bytes too)."""
    return SESSION_CREDENTIAL + key.encode()


class SessionWatch:
    def __init__(self, sessions: SessionStore, on_ended, poll: float = POLL_SECONDS):
        self.sessions = sessions
        self.on_ended = on_ended  # called with a frozenset of session credentials
        self.poll = poll
        self._stop = threading.Event()
        self._thread = None

    def start(self) -> SessionWatch:
        self._thread = threading.Thread(target=self._run, name="session-watch", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        since = None
        while not self._stop.is_set():
            try:
                if since is None:
                    _keys, since = self.sessions.ended_since(None)
                else:
                    keys, now = self.sessions.ended_since(since)
                    if keys:
                        self.on_ended(frozenset(map(session_credential, keys)))
                    since = now
            except Exception as exc:  # noqa: BLE001 - the database away: the next poll retries
                log.warning("session watch: %s", type(exc).__name__)
            self._stop.wait(self.poll)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
