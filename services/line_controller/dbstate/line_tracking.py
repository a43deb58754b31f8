"""The line's state over time (PRODUCT.md, "Shifts, downtime and OEE";
docs/oee.md): ``line_state_interval``, kept in the transaction of the change
that causes it, its stops' reasons and splits, and planned downtime.

The loop records what the line does: ``RUNNING`` (a running order and nothing
stopped), ``IDLE`` (no running order) or ``DOWN`` with the cause it sees, by
precedence: the PLC lost (``PLC_DISCONNECTED``), the robot's fault that an
emergency stop holds (``ESTOP``), a machine in fault (``EQUIPMENT_FAULT``), a
manual action waiting (``MANUAL_ACTION``). A change of state or of cause closes
the open stretch and opens the next at the transaction's time, and is the event
``LineStateChanged``. ``PLANNED_DOWN`` and ``NOT_SCHEDULED`` are the calendar's
(computed when asked, never written by a timer).

A controller that was away: every loop transaction stamps the open stretch's
``seen_at``, and while an order runs a tick does at least every
``tick_gate.HEARTBEAT_SECONDS`` (5 s; a stamp alone commits without waiting for
its WAL flush: ``unit_of_work``); when the loop starts, a stretch left open
RUNNING or DOWN means an order was running when it went: ``DOWN`` with cause
``CONTROLLER_DOWN`` from that ``seen_at`` until now (a gap of less than
``CONTROLLER_AWAY_SECONDS`` is a restart's and records nothing)."""

from __future__ import annotations

from datetime import datetime

from shared import serialize

from .base import Rejected, StateBase

CONTROLLER_DOWN = "CONTROLLER_DOWN"
# A running line's loop stamps the open stretch at least every 5 s (its heartbeat tick,
# on a 1 s timer): a gap shorter than this is that pace plus a restart's few seconds,
# not an outage (nothing tells them apart).
CONTROLLER_AWAY_SECONDS = 10.0
_STRETCH = "id, state, cause, equipment_id, started_at, ended_at, seen_at, reason_code, comment, " \
           "assigned_by, assigned_at, split_from"


class LineTracking(StateBase):
    # One statement: derive the line's state, and when it (or its cause) changed close
    # the open stretch and open the next; else stamp the open one as seen. The scalar
    # subqueries run first (initplans): the open row is closed before the new one
    # meets the one-open-stretch index.
    _TRACK_LINE_SQL = (
        "WITH why AS (SELECT cause, equipment_id FROM ("
        "  SELECT 1 AS rank, 'PLC_DISCONNECTED' AS cause, NULL::varchar AS equipment_id FROM alarm "
        "    WHERE code IN ('PLC_DISCONNECTED', 'PLC_IDENTITY_MISMATCH') AND status <> 'CLEARED' "
        "  UNION ALL SELECT 2, 'ESTOP', NULL FROM alarm WHERE code = 'ROBOT_FAULT' AND status <> 'CLEARED' "
        "  UNION ALL SELECT 3, 'EQUIPMENT_FAULT', id FROM equipment WHERE status IN ('FAULT', 'OFFLINE') "
        "  UNION ALL SELECT 4, 'MANUAL_ACTION', equipment_id FROM manual_action WHERE status = 'OPEN' "
        "  ) w ORDER BY rank, equipment_id NULLS FIRST LIMIT 1), "
        "running AS (SELECT EXISTS (SELECT 1 FROM work_order WHERE status = 'RUNNING') AS yes), "
        "derived AS (SELECT CASE WHEN NOT r.yes THEN 'IDLE' WHEN w.cause IS NULL THEN 'RUNNING' ELSE 'DOWN' END "
        "  AS state, CASE WHEN r.yes THEN w.cause END AS cause, CASE WHEN r.yes THEN w.equipment_id END "
        "  AS equipment_id FROM running r LEFT JOIN why w ON true), "
        "open AS (SELECT id, state, cause, equipment_id FROM line_state_interval WHERE ended_at IS NULL), "
        "changed AS (SELECT d.* FROM derived d LEFT JOIN open o ON true WHERE o.id IS NULL "
        "  OR o.state <> d.state OR o.cause IS DISTINCT FROM d.cause "
        "  OR o.equipment_id IS DISTINCT FROM d.equipment_id), "
        "closed AS (UPDATE line_state_interval i SET ended_at = $1, seen_at = $1 FROM changed "
        "  WHERE i.ended_at IS NULL RETURNING i.id), "
        "seen AS (UPDATE line_state_interval i SET seen_at = $1 WHERE i.ended_at IS NULL "
        "  AND NOT EXISTS (SELECT 1 FROM changed) RETURNING i.id) "
        "INSERT INTO line_state_interval (state, cause, equipment_id, started_at, seen_at) "
        "SELECT state, cause, equipment_id, $1, $1 FROM changed "
        "WHERE (SELECT count(*) FROM closed) >= 0 AND (SELECT count(*) FROM seen) >= 0 "
        "RETURNING id, state, cause, equipment_id")

    def track_line(self) -> None:
        """Keep ``line_state_interval`` in step with this transaction (every loop
        transaction: also the controller's heartbeat)."""
        info = self.conn.info  # per DBAPI connection: prepared once, planned generically
        if not info.get("track_line_prepared"):
            self.conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            self.conn.exec_driver_sql(f"PREPARE linectl_track_line (timestamptz) AS {self._TRACK_LINE_SQL}")
            info["track_line_prepared"] = True
        for row in self.conn.exec_driver_sql("EXECUTE linectl_track_line (%(now)s)", {"now": self.now}):
            self._state_changed(row.id, row.state, row.cause, row.equipment_id, self.now)

    def _state_changed(self, stretch_id: int, state: str, cause: str | None, equipment_id: str | None,
                       since: datetime) -> None:
        self.emit("LineStateChanged", {"id": stretch_id, "state": state, "cause": cause,
                                       "equipmentId": equipment_id, "since": serialize.iso(since)})

    def controller_back(self) -> bool:
        """At the loop's start: a stretch left open RUNNING or DOWN (an order was
        running) becomes a ``CONTROLLER_DOWN`` stop from when the loop was last seen.
        True when one was recorded (the transaction then has events to close)."""
        gone = self._one("SELECT id, state, cause, seen_at FROM line_state_interval WHERE ended_at IS NULL")
        if gone is None or gone.state == "IDLE" or gone.cause == CONTROLLER_DOWN \
                or (self.now - gone.seen_at).total_seconds() < CONTROLLER_AWAY_SECONDS:
            return False
        self._all("UPDATE line_state_interval SET ended_at = seen_at WHERE id = :id RETURNING id", id=gone.id)
        row = self._one("INSERT INTO line_state_interval (state, cause, started_at, seen_at) "
                        "VALUES ('DOWN', :c, :at, :at) RETURNING id", c=CONTROLLER_DOWN, at=gone.seen_at)
        self._state_changed(row.id, "DOWN", CONTROLLER_DOWN, None, gone.seen_at)
        return True

    # -- the operator's word on a stop ----------------------------------------------------

    def stop(self, stop_id: int):
        row = self._one(f"SELECT {_STRETCH} FROM line_state_interval WHERE id = :id AND state = 'DOWN'",
                        id=stop_id)
        if row is None:
            raise Rejected("NOT_FOUND", f"stop {stop_id} does not exist")
        return row

    def assign_stop_reason(self, stop_id: int, reason_code: str, comment: str | None, actor: str):
        """The reason (and comment) on a stop: times and counts stay as they are."""
        row = self._one(
            f"UPDATE line_state_interval SET reason_code = :r, comment = :c, assigned_by = :a, "
            f"assigned_at = :now WHERE id = :id AND state = 'DOWN' RETURNING {_STRETCH}",
            r=reason_code, c=comment, a=actor, now=self.now, id=stop_id)
        if row is None:
            raise Rejected("NOT_FOUND", f"stop {stop_id} does not exist")
        self.emit("StopReasonAssigned", stop_json(row))
        return row

    def split_stop(self, stop_id: int, at: datetime, actor: str):
        """A stop in two at ``at``: the first part keeps its id, the second is a new
        stop with the same cause and reason (an open stop's second part stays open)."""
        stop = self.stop(stop_id)
        end = stop.ended_at or self.now
        if not stop.started_at < at < end:
            raise Rejected("VALIDATION_ERROR", f"at: must be within the stop ({serialize.iso(stop.started_at)} "
                           f"to {serialize.iso(end)})")
        first = self._one(f"UPDATE line_state_interval SET ended_at = :at WHERE id = :id RETURNING {_STRETCH}",
                          at=at, id=stop_id)
        second = self._one(
            "INSERT INTO line_state_interval (state, cause, equipment_id, started_at, ended_at, seen_at, "
            "reason_code, comment, assigned_by, assigned_at, split_from) VALUES ('DOWN', :cause, :e, :at, :end, "
            f":seen, :r, :c, :by, :when, :id) RETURNING {_STRETCH}",
            cause=stop.cause, e=stop.equipment_id, at=at, end=stop.ended_at, seen=stop.seen_at,
            r=stop.reason_code, c=stop.comment, by=stop.assigned_by, when=stop.assigned_at, id=stop_id)
        self.emit("StopSplit", {"stop": stop_json(first), "newStop": stop_json(second), "by": actor})
        return first, second

    def add_planned_downtime(self, start: datetime, end: datetime, reason: str, actor: str) -> dict:
        row = self._one("INSERT INTO planned_downtime (started_at, ended_at, reason, created_by, created_at) "
                        "VALUES (:s, :e, :r, :a, :now) RETURNING id, started_at, ended_at, reason, created_by, "
                        "created_at", s=start, e=end, r=reason, a=actor, now=self.now)
        planned = planned_json(row)
        self.emit("PlannedDowntimeAdded", planned)
        return planned


def stop_json(row) -> dict:
    """A stop as the API and the events show it (``lineId`` is the gateway's)."""
    return {"id": row.id, "equipmentId": row.equipment_id, "from": serialize.iso(row.started_at),
            "to": serialize.iso(row.ended_at) if row.ended_at else None, "cause": row.cause,
            "reasonCode": row.reason_code, "comment": row.comment, "assignedBy": row.assigned_by,
            "assignedAt": serialize.iso(row.assigned_at) if row.assigned_at else None,
            "splitFrom": row.split_from}


def planned_json(row) -> dict:
    return {"id": row.id, "from": serialize.iso(row.started_at), "to": serialize.iso(row.ended_at),
            "reason": row.reason, "createdBy": row.created_by, "createdAt": serialize.iso(row.created_at)}
