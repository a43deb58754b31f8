"""The bearer tokens one gateway process accepts, and their rotation without a restart.

:class:`TokenStore` holds the tokens read at start. When they came from a file
(``LINECTL_TOKENS_FILE``, or the data directory's generated ``tokens``), it
re-reads that file when it changed, that is when its inode, size or mtime
differ from the last read (one ``stat``, at most once a second per process:
on a request's token check and from the ``token-watch`` thread, so a worker
serving only websockets notices too), and at once on SIGHUP. A file that
cannot be read or parsed keeps the last good tokens and logs an error, once
per version of the file: a botched edit never locks everybody out.

Tokens that are gone (or whose role or name changed) are *revoked*: the
listeners get their keys (:func:`token_key`, a digest, so no stream or log
record holds a token itself) and close what those tokens opened (the
StreamHub closes their websockets with 4401).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from shared.config import SettingsError, TokenHolder, read_tokens_file

log = logging.getLogger(__name__)

CHECK_SECONDS = 1.0


def token_key(token: str) -> bytes:
    """What stands for a token where it is kept beside a connection."""
    return hashlib.sha256(token.encode()).digest()


def _signature(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


class TokenStore:
    def __init__(self, tokens: Mapping[str, TokenHolder], path: Path | None = None,
                 check_seconds: float = CHECK_SECONDS):
        self.path = Path(path) if path is not None else None
        self.check_seconds = check_seconds
        self._tokens = dict(tokens)
        self._keys = {token_key(t): h for t, h in self._tokens.items()}
        # Unknown: the first check reads the file (it may have changed since the
        # settings were read, e.g. in a worker forked later).
        self._seen: tuple | None = ()
        self._failed: tuple | None = ()  # the version last logged as bad
        self._next_check = 0.0
        self._lock = threading.Lock()
        self._listeners: list[Callable[[frozenset[bytes]], None]] = []
        self._forced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lookups -----------------------------------------------------------------

    def holder_for(self, token: str | None) -> TokenHolder | None:
        if not token:
            return None
        self.refresh()
        found = None
        for known, holder in self._tokens.items():
            # No early exit: the time taken does not depend on which token matched.
            if hmac.compare_digest(known.encode(), token.encode()):
                found = holder
        return found

    def knows(self, key: bytes) -> bool:
        """Whether the token of this :func:`token_key` is accepted now."""
        return key in self._keys

    def add_listener(self, on_revoked: Callable[[frozenset[bytes]], None]) -> None:
        self._listeners.append(on_revoked)

    # -- re-reading ----------------------------------------------------------------

    def refresh(self, force: bool = False) -> bool:
        """Re-read the file if it changed (or ``force``); at most once per
        ``check_seconds`` unless forced. True when the tokens changed."""
        if self.path is None:
            return False
        now = time.monotonic()
        if not force and now < self._next_check:
            return False
        # One checker at a time; a request finding another one at it uses the tokens it has.
        if not self._lock.acquire(blocking=force):
            return False
        try:
            self._next_check = now + self.check_seconds
            seen = _signature(self.path)
            if not force and seen == self._seen:
                return False
            self._seen = seen
            try:
                tokens = read_tokens_file(self.path)
            except SettingsError as exc:
                if force or seen != self._failed:
                    log.error("tokens: keeping the last good tokens: %s", exc)
                    self._failed = seen
                return False
            self._failed = ()
            return self._replace(tokens)
        finally:
            self._lock.release()

    def _replace(self, tokens: dict[str, TokenHolder]) -> bool:
        keys = {token_key(t): h for t, h in tokens.items()}
        revoked = frozenset(k for k, h in self._keys.items() if keys.get(k) != h)
        added = sum(1 for k in keys if k not in self._keys)
        if not revoked and not added:
            return False
        self._tokens, self._keys = tokens, keys
        log.warning("tokens: re-read %s: %d tokens, %d revoked, %d added",
                    self.path, len(tokens), len(revoked), added)
        if revoked:
            for on_revoked in self._listeners:
                try:
                    on_revoked(revoked)
                except Exception:  # noqa: BLE001 - one listener's fault must not keep a token alive elsewhere
                    log.exception("tokens: a revocation listener failed")
        return True

    # -- the watch thread and SIGHUP -----------------------------------------------

    def request_refresh(self) -> None:
        """Re-read now (SIGHUP). Safe in a signal handler: it only wakes the watch thread."""
        self._forced.set()

    def watch(self) -> TokenStore:
        """Check the file every ``check_seconds`` from a thread of its own."""
        if self.path is not None and self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="token-watch", daemon=True)
            self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            forced = self._forced.wait(self.check_seconds)
            self._forced.clear()
            if self._stop.is_set():
                return
            try:
                self.refresh(force=forced)
            except Exception:  # noqa: BLE001 - the watch must outlive a surprise; the last tokens stay
                log.exception("tokens: checking %s failed", self.path)

    def stop(self) -> None:
        self._stop.set()
        self._forced.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
