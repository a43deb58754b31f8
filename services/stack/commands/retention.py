"""``linectl purge``: delete what the retention policy says is old (see
shared/db/retention.py), once; ``linectl retention``: the same every
``LINECTL_RETENTION_INTERVAL_SECONDS`` until SIGTERM (``linectl up``'s
``retention`` process). A failed scheduled round (the database away) is
retried at the next one."""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading

from services.stack.commands.database import database_url, stop_if_started
from shared.config import Settings
from shared.db.engine import make_engine
from shared.db.retention import RetentionPolicy, purge

log = logging.getLogger("linectl.retention")


def run_retention(settings: Settings, args) -> int:
    args.every = settings.retention_interval_seconds or 3600
    return run_purge(settings, args)


def _policy(settings: Settings, args) -> RetentionPolicy:
    given = {"event_days": args.event_days, "ai_days": args.ai_days, "audit_days": args.audit_days,
             "dead_letter_days": args.dead_letter_days}
    return dataclasses.replace(RetentionPolicy.from_settings(settings),
                               **{k: v for k, v in given.items() if v is not None})


def run_purge(settings: Settings, args) -> int:
    policy = _policy(settings, args)
    url, server = database_url(settings)
    engine = make_engine(url, pool_size=1)
    stopping = threading.Event()
    if args.every:
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        while True:
            try:
                counts = purge(engine, policy)
            except Exception as exc:  # noqa: BLE001 - once: fail; on a schedule: next round
                if not args.every:
                    raise
                log.warning("retention round failed (%s); next in %ss", type(exc).__name__, args.every)
            else:
                summary = " ".join(f"{k}={v}" for k, v in counts.items())
                if args.every:
                    log.info("retention: deleted %s", summary)
                else:
                    print(summary)
            if not args.every or stopping.wait(args.every):
                return 0
    finally:
        engine.dispose()
        stop_if_started(server)
