"""The publisher's side of PostgreSQL: each line's event log as its outbox, the
``uns_node`` row that says how far the broker acknowledged it, and the lock
that lets one publisher per plant publish.

* A line's log is read in its own schema (``shared.db.lines``), as the
  gateway reads it, by the gateway's role (``shared.db.roles``: it reads every
  line table and writes ``uns_*``).
* **One publisher per plant:** a session-level advisory lock
  (``pg_try_advisory_lock``) held on a dedicated connection. PostgreSQL frees it
  when that session ends, also when the process is killed (the server sees the
  socket close) or the server fails over (the session is gone with it). A
  standby tries again every ``LOCK_RETRY_SECONDS``; the holder checks its
  session every ``LOCK_CHECK_SECONDS`` and stops publishing when it is lost.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import datetime, timedelta

from sqlalchemy import text
from sqlalchemy.engine import Connection, Engine

from services.uns.model import CYCLES_SQL, LAST_PIECE, NODE, Catalog, FinishedPiece, LineModel, finished_jobs
from shared import serialize
from shared.db.lines import PUBLIC, LineNotPlaced, placement, quote
from shared.oee import oee_items
from shared.piece_query import finished_summaries
from shared.shift_calendar import Calendar

log = logging.getLogger(__name__)

PUBLISHER_LOCK = 0x756E735F6C6F636B  # "uns_lock": pg_try_advisory_lock's key, one per database (plant)
LOCK_RETRY_SECONDS = 0.5
LOCK_CHECK_SECONDS = 0.5
# A holder publishes only within this of its last confirmation, and a new holder waits
# this long before its births: two publishers never overlap, a failover included.
LOCK_FENCE_SECONDS = 1.5
PAGE = 500


def publisher_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class LineOutbox:
    """One line's log and its ``uns_node`` row."""

    def __init__(self, engine: Engine, line_id: str, default: bool):
        self.engine = engine
        self.line_id = line_id
        self.default = default
        self.schema: str | None = None

    def _enter(self, conn: Connection) -> None:
        if self.schema is None:
            self.schema = placement(conn, self.line_id, default=self.default).schema
        if self.schema != PUBLIC:
            conn.execute(text(f"SET LOCAL search_path TO {quote(self.schema)}, public"))

    def ready(self) -> bool:
        """The line has its tables (its controller or ``linectl migrate`` made them)."""
        try:
            with self.engine.begin() as conn:
                self._enter(conn)
            return True
        except LineNotPlaced:
            return False

    def start(self) -> tuple[int, int]:
        """``(acked seq, bdSeq)``; a line seen for the first time starts at its log's
        end: what happened before the publisher existed is not forwarded."""
        with self.engine.begin() as conn:
            self._enter(conn)
            conn.execute(text(
                "INSERT INTO public.uns_node (line_id, schema_name, acked_seq) "
                "SELECT :line, :schema, coalesce(max(seq), 0) FROM event_log ON CONFLICT (line_id) DO NOTHING"),
                {"line": self.line_id, "schema": self.schema})
            row = conn.execute(text("SELECT acked_seq, bd_seq FROM public.uns_node WHERE line_id = :line"),
                               {"line": self.line_id}).one()
        return int(row.acked_seq), int(row.bd_seq)

    def frames_after(self, after: int, limit: int = PAGE, upto: int | None = None) -> list[dict]:
        """Logged events with ``after < seq (<= upto)``, oldest first, as frames."""
        with self.engine.begin() as conn:
            self._enter(conn)
            rows = conn.execute(text(
                "SELECT * FROM event_log WHERE seq > :after AND (CAST(:upto AS bigint) IS NULL OR seq <= :upto)"
                " ORDER BY seq LIMIT :limit"), {"after": after, "upto": upto, "limit": limit})
            return [serialize.event_frame(r) for r in rows]

    def newest_seq(self) -> int:
        with self.engine.begin() as conn:
            self._enter(conn)
            return int(conn.execute(text("SELECT coalesce(max(seq), 0) FROM event_log")).scalar())

    def snapshot(self, catalog: Catalog) -> LineModel:
        """The line's values and the seq they include, read in one snapshot."""
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                self._enter(conn)
                model = LineModel.read(conn, catalog)
        piece = model.values.get((NODE, LAST_PIECE))
        if piece is not None:
            model.values[(NODE, LAST_PIECE)] = {"lineId": self.line_id, **piece}
        return model

    def cycles(self, equipment_ids: list[str]) -> dict[str, int]:
        with self.engine.begin() as conn:
            self._enter(conn)
            return {r[0]: int(r[1]) for r in conn.execute(text(CYCLES_SQL), {"ids": equipment_ids})}

    def finished_pieces(self, frames: list[dict]) -> list[FinishedPiece]:
        """The pieces one transaction's frames finished, with their records (written in
        that transaction by the loop, so there by the time its events are read)."""
        ended = finished_jobs(frames)
        if not ended:
            return []
        with self.engine.begin() as conn:
            self._enter(conn)
            summaries = {s["jobId"]: s for s in finished_summaries(conn, [job_id for job_id, _f in ended])}
        return [FinishedPiece(frame, {"lineId": self.line_id, **summaries[job_id]})
                for job_id, frame in ended if job_id in summaries]

    def shift_oee(self, calendar: Calendar, ideals: dict[str, float | None], microstop_seconds: float,
                  now: datetime) -> tuple[str | None, dict | None]:
        """The shift under way at ``now`` and its OEE item so far (``shared.oee``, as
        ``GET /api/lines/{id}/oee?by=shift`` has it); ``(None, None)`` outside every shift."""
        shift = next((i for i in calendar.instances(now - timedelta(seconds=1), now + timedelta(seconds=1))
                      if i.start <= now < i.end), None)
        if shift is None:
            return None, None
        with self.engine.begin() as conn:
            self._enter(conn)
            items = oee_items(conn, calendar, ideals, shift.start, shift.end, "shift", now, microstop_seconds)
        return shift.name, (items[0] if items else None)

    def save(self, *, acked_seq: int | None = None, bd_seq: int | None = None, connected: bool | None = None,
             messages: int = 0) -> None:
        """What changed of the node's row (``acked_seq`` never goes back)."""
        with self.engine.begin() as conn:
            conn.execute(text(
                "UPDATE public.uns_node SET acked_seq = GREATEST(acked_seq, coalesce(:acked, acked_seq)),"
                " bd_seq = coalesce(:bd, bd_seq), connected = coalesce(:connected, connected),"
                " messages = messages + :messages, publisher = :publisher, heartbeat_at = now(),"
                " updated_at = now() WHERE line_id = :line"),
                {"acked": acked_seq, "bd": bd_seq, "connected": connected, "messages": messages,
                 "publisher": publisher_name(), "line": self.line_id})


def mark_all_disconnected(engine: Engine, line_ids: list[str]) -> None:
    """A clean stop: no node of this publisher is connected any more."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE public.uns_node SET connected = false, updated_at = now()"
                          " WHERE line_id = ANY(:lines)"), {"lines": line_ids})


class PublisherLock:
    """The plant's publisher lock, on a connection of its own (not pooled: the
    lock is the session's)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._conn = None

    def try_take(self) -> bool:
        try:
            if self._conn is None:
                self._conn = self.engine.connect()
            taken = bool(self._conn.execute(text("SELECT pg_try_advisory_lock(:key)"),
                                            {"key": PUBLISHER_LOCK}).scalar())
            self._conn.commit()
            return taken
        except Exception:  # noqa: BLE001 - the database is away: try again later
            log.warning("uns: the publisher lock cannot be asked for (database away)", exc_info=True)
            self.release()
            return False

    def held(self) -> bool:
        """Still ours: the session that took it is alive (and the lock with it)."""
        if self._conn is None:
            return False
        try:
            held = self._conn.execute(text(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
                " AND objid = (:key & 4294967295) AND granted"), {"key": PUBLISHER_LOCK}).scalar()
            self._conn.commit()
            return bool(held)
        except Exception:  # noqa: BLE001 - the session is gone: so is the lock
            return False

    def release(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.invalidate()  # closes the session: PostgreSQL frees its locks
                conn.close()
            except Exception:  # noqa: BLE001
                pass
