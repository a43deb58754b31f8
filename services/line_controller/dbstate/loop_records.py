"""The loop's own records: a message's outcome, its events and audit row in one
statement at the end of each transaction, and the inbox it restarts from."""

from __future__ import annotations

from sqlalchemy import text

from shared import piece_record, serialize

from .base import StateBase, as_json


class LoopRecords(StateBase):
    # -- the loop's own records ----------------------------------------------------------

    _RECORD = (
        "m AS (INSERT INTO loop_message (id, type, category, payload, correlation_id, actor, "
        "  created_at, status, result, error_code, error_message, handled_at) "
        "  VALUES (:id, :type, :cat, CAST(:payload AS jsonb), :corr, :actor, :created, :status, "
        "  CAST(:result AS jsonb), :ecode, :emsg, now()) "
        "  ON CONFLICT (id) DO UPDATE SET status = EXCLUDED.status, result = EXCLUDED.result, "
        "  error_code = EXCLUDED.error_code, error_message = EXCLUDED.error_message, handled_at = now() "
        "  WHERE loop_message.status = 'QUEUED' RETURNING id)"
    )

    def close_transaction(self, msg, *, status: str, result: dict | None = None,
                          error: tuple[str, str] | None = None, audit: dict | None = None,
                          first_seq: int, tx_id: int) -> list[dict] | None:
        """One statement ends a loop transaction: the message's outcome in
        ``loop_message``, the events in ``event_log`` (numbered from ``first_seq``) and
        the audit row of a command, and what the events add to the pieces' records
        (``shared.piece_record``). Returns the frames, or None when the message id
        was already handled (a duplicate: the caller rolls back, nothing changes).
        The machine-state rollup follows the events first (:meth:`track_machines`).

        The duplicate check comes last on purpose: duplicates are rare, and checking
        here instead of before the handler saves a round trip per message."""
        self.track_machines()
        self.track_line()  # the line's state, in the transaction of its cause (docs/oee.md)
        frames = self._frames(first_seq, tx_id)
        ctes, params = [], {"frames": as_json(frames), "tx": tx_id, "at": self.now,
                            "mid": msg.id if msg is not None else None}
        guard = ""
        if msg is not None:
            ctes.append(self._RECORD)
            guard = " WHERE EXISTS (SELECT 1 FROM m)"
            params.update(id=msg.id, type=msg.type, cat=msg.category, payload=as_json(msg.payload),
                          corr=msg.correlation_id, actor=msg.actor, created=msg.created_at,
                          status=status, result=None if result is None else as_json(result),
                          ecode=error[0] if error else None, emsg=error[1] if error else None)
        # The pieces' records of these changes, in this transaction (a statement prepared once).
        piece_record.write_prepared(self.conn, piece_record.translate(self.events, self.now), self.now)
        ctes.append(
            "e AS (INSERT INTO event_log (seq, tx_id, type, at, payload, message_id) "
            "SELECT f.seq, :tx, f.type, :at, f.payload, :mid "
            "FROM jsonb_to_recordset(CAST(:frames AS jsonb)) AS f(seq bigint, type text, payload jsonb)"
            f"{guard})")
        if audit is not None:
            ctes.append(
                "a AS (INSERT INTO audit_log (actor, action, target_type, target_id, outcome, detail) "
                f"SELECT :a_actor, :a_action, :a_tt, :a_ti, :a_outcome, CAST(:a_detail AS jsonb){guard})")
            params.update(a_actor=audit["actor"], a_action=audit["action"], a_tt=audit["targetType"],
                          a_ti=None if audit["targetId"] is None else str(audit["targetId"]),
                          a_outcome=audit["outcome"], a_detail=as_json(audit.get("detail") or {}))
        tail = "SELECT count(*) FROM m" if msg is not None else "SELECT 1"
        recorded = self.conn.execute(text("WITH " + ", ".join(ctes) + " " + tail), params).scalar()
        return frames if recorded else None

    def _frames(self, first_seq: int, tx_id: int) -> list[dict]:
        at = serialize.iso(self.now)
        return [{"seq": first_seq + i, "txId": tx_id, "type": t, "at": at, "payload": p}
                for i, (t, p) in enumerate(self.events)]

    def last_seq_and_tx(self) -> tuple[int, int]:
        row = self._one("SELECT COALESCE(MAX(seq), 0) AS seq, COALESCE(MAX(tx_id), 0) AS tx FROM event_log")
        return row.seq, row.tx

    def event_exists(self, seq: int, tx_id: int) -> bool:
        return self._one("SELECT 1 AS x FROM event_log WHERE seq = :s AND tx_id = :t", s=seq, t=tx_id) is not None

    def queued_messages(self):
        return self._all("SELECT * FROM loop_message WHERE status = 'QUEUED' ORDER BY created_at, id")

    def message_outcome(self, msg_id: str):
        return self._one("SELECT * FROM loop_message WHERE id = :id", id=msg_id)

    def persist_queued(self, msg) -> None:
        """The RPC entrypoint's durable hand-over: the command survives a crash once this commits."""
        self.conn.execute(text(
            "INSERT INTO loop_message (id, type, category, payload, correlation_id, actor, created_at) "
            "VALUES (:id, :t, :c, CAST(:p AS jsonb), :corr, :a, :at) ON CONFLICT (id) DO NOTHING"),
            {"id": msg.id, "t": msg.type, "c": msg.category, "p": as_json(msg.payload),
             "corr": msg.correlation_id, "a": msg.actor, "at": msg.created_at})
