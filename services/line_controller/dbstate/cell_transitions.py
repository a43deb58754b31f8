"""Equipment, its slots and the dock: conditional updates of the cell's fixed parts."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import text

from shared import serialize

from .base import ConditionFailed, StateBase


class CellTransitions(StateBase):
    # -- equipment -------------------------------------------------------------------

    def set_equipment_slot(self, equipment_id: str, slot_no: int, expected_state, next_state: str,
                           job_id: int | None):
        expected = [expected_state] if isinstance(expected_state, str) else list(expected_state)
        return self._change(
            "UPDATE equipment_slot SET status = :next, current_job_id = :job, updated_at = now(), "
            "occupied_at = CASE WHEN :next = 'EMPTY' THEN NULL "
            "  WHEN status = 'EMPTY' THEN clock_timestamp() ELSE occupied_at END "
            "WHERE equipment_id = :e AND slot_no = :n AND status = ANY(:exp) RETURNING *",
            f"slot {equipment_id}:{slot_no} is not {'/'.join(expected)}", "SlotChanged", serialize.slot,
            e=equipment_id, n=slot_no, exp=expected, next=next_state, job=job_id)

    def set_equipment_status(self, equipment_id: str, status: str):
        return self._change(
            "UPDATE equipment SET status = :s, version = version + 1, updated_at = now() "
            "WHERE id = :id AND status <> :s RETURNING *", f"equipment {equipment_id} is already {status}",
            "EquipmentChanged", lambda row: {"id": row.id, "status": row.status}, id=equipment_id, s=status)

    def sync_equipment(self, layout) -> None:
        """Equipment rows follow the layout file; slots are added, never dropped while occupied."""
        for e in layout.equipment:
            self.conn.execute(text(
                "INSERT INTO equipment (id, name, kind, batch, slot_count) VALUES (:id, :n, :k, :b, :c) "
                "ON CONFLICT (id) DO UPDATE SET name = :n, kind = :k, batch = :b, slot_count = :c"),
                {"id": e.id, "n": e.name, "k": e.kind, "b": e.batch, "c": e.slots})
            self.conn.execute(text(
                "INSERT INTO equipment_slot (equipment_id, slot_no) "
                "SELECT :id, n FROM generate_series(1, :c) AS n ON CONFLICT DO NOTHING"),
                {"id": e.id, "c": e.slots})
            self.conn.execute(text(
                "DELETE FROM equipment_slot WHERE equipment_id = :id AND slot_no > :c AND status = 'EMPTY'"),
                {"id": e.id, "c": e.slots})

    # -- dock ------------------------------------------------------------------------

    def _dock(self, sql: str, **params) -> bool:
        """One conditional update of the dock row (``sql`` RETURNING pieces_waiting);
        a changed known count is an event. False when the condition did not hold."""
        row = self._one(sql, **params)
        if row is not None and row.pieces_waiting is not None:
            self.emit("DockChanged", {"piecesWaiting": row.pieces_waiting})
        return row is not None

    def observe_dock(self, pieces: int, observed_at: str | datetime | None) -> None:
        """The PLC's count of pieces at the dock, read at ``observed_at`` (None:
        now). Ignored when a newer reading has been applied already."""
        self._dock("UPDATE dock SET pieces_waiting = :n, observed_at = COALESCE(CAST(:t AS timestamptz), now()), "
                   "updated_at = now() WHERE id = 1 AND (observed_at IS NULL "
                   "OR observed_at <= COALESCE(CAST(:t AS timestamptz), now())) "
                   "RETURNING pieces_waiting", n=max(0, int(pieces)), t=observed_at)

    def take_dock_pieces(self, count: int) -> None:
        """A refill claims ``count`` pieces; refused if the dock is known to hold fewer."""
        if not self._dock("UPDATE dock SET pieces_waiting = pieces_waiting - :n, updated_at = now() "
                          "WHERE id = 1 AND (pieces_waiting IS NULL OR pieces_waiting >= :n) "
                          "RETURNING pieces_waiting", n=count):
            raise ConditionFailed(f"the dock holds fewer than {count} unclaimed pieces")

    def give_back_dock_pieces(self, count: int) -> None:
        """A refill's piece is (or may be) still at the dock: counted there again.
        Ignored while the PLC has not reported a count (NULL limits nothing)."""
        self._dock("UPDATE dock SET pieces_waiting = pieces_waiting + :n, updated_at = now() "
                   "WHERE id = 1 AND pieces_waiting IS NOT NULL RETURNING pieces_waiting", n=count)
