"""What the start-up checks read beside the rows they compare: where a piece
may be on its way (so the PLC's buffer sensors are not compared there), and
the dock's record with what may have left it since that record's reading."""

from __future__ import annotations

from .base import StateBase

# Tasks still open, or failed with an alarm not cleared yet: their own result or
# question settles the positions they touched.
_UNSETTLED_TASKS = ("SELECT * FROM task WHERE status IN ('PENDING','RUNNING') OR id IN "
                    "(SELECT task_id FROM alarm WHERE status <> 'CLEARED' AND task_id IS NOT NULL)")


class RecoveryReads(StateBase):

    def buffer_slots_unsettled(self) -> set[int]:
        """Buffer slots an open task, or a failed one whose alarm is not cleared,
        moves a piece to or from or works on: its ``bufferSlot`` and the buffer
        slots its jobs hold."""
        rows = self._all(
            f"WITH t AS ({_UNSETTLED_TASKS}) "
            "SELECT (t.params->>'bufferSlot')::int AS n FROM t "
            "UNION SELECT j.temp_slot_no FROM t JOIN job j "
            "ON j.id = t.job_id OR t.params->'jobIds' @> to_jsonb(j.id)")
        return {r.n for r in rows if r.n is not None}

    def machine_slots_unsettled(self) -> set[tuple[str, int]]:
        """Machine slots an open task, or a failed one whose alarm is not cleared,
        loads, unloads or swaps (its ``equipment_id`` and ``slot_no``)."""
        rows = self._all(f"WITH t AS ({_UNSETTLED_TASKS}) SELECT DISTINCT equipment_id, slot_no FROM t "
                         "WHERE equipment_id IS NOT NULL AND slot_no IS NOT NULL")
        return {(r.equipment_id, r.slot_no) for r in rows}

    def dock_record(self):
        """The dock's recorded count (``pieces``; None: never read from the PLC) and
        ``may_have_left``: refills whose piece may have left the dock although the
        record still counts it: created before its reading and not ended by then
        (the reading counted a piece they took later), or failed or cancelled after
        it (their piece was given back to the count, and may be in the gripper)."""
        return self._one(
            "SELECT d.pieces_waiting AS pieces, (SELECT count(*) FROM task t "
            "  WHERE t.kind = 'DOCK_TO_BUFFER' AND d.observed_at IS NOT NULL AND ("
            "    (t.created_at < d.observed_at AND (t.finished_at IS NULL OR t.finished_at > d.observed_at))"
            "    OR (t.status IN ('FAILED', 'CANCELLED') AND t.finished_at > d.observed_at))) AS may_have_left "
            "FROM dock d WHERE d.id = 1")
