"""The machine-state rollup behind /api/stats (``docs/stats.md``): machine
state intervals and cycles, kept in step with a transaction's events."""

from __future__ import annotations

from sqlalchemy import text

from shared import serialize

from .base import StateBase


class MachineTracking(StateBase):
    # -- the machine-state rollup (behind /api/stats; docs/stats.md) -------------------

    # A machine's state from its row, its slots and their jobs. PROCESSING from the
    # moment the loop starts a cycle (its jobs are PROCESSING from then on) until
    # the piece is done, whether or not the start's own result has come back.
    # One statement derives the touched machines' states, closes the open interval
    # of each that changed and opens its next one, and returns those: a transaction
    # pays one round trip. The scalar subquery runs first (an initplan), so the
    # open rows are closed before the new ones meet the one-open-interval index.
    _TRACK_STATES_SQL = (
        "WITH derived AS (SELECT e.id, CASE "
        "  WHEN e.status IN ('FAULT', 'OFFLINE') THEN 'FAULT' "
        "  WHEN e.status = 'RUNNING' OR EXISTS (SELECT 1 FROM equipment_slot s JOIN job j "
        "    ON j.id = s.current_job_id WHERE s.equipment_id = e.id AND s.status = 'OCCUPIED' "
        "    AND (j.status = 'PROCESSING' OR j.held_status = 'PROCESSING')) THEN 'PROCESSING' "
        "  WHEN EXISTS (SELECT 1 FROM equipment_slot s WHERE s.equipment_id = e.id "
        "    AND s.status = 'DONE') THEN 'WAITING_UNLOAD' "
        "  ELSE 'IDLE' END AS state FROM equipment e WHERE e.id = ANY(:ids)), "
        "changed AS (SELECT d.id, d.state FROM derived d LEFT JOIN machine_state_interval i "
        "  ON i.equipment_id = d.id AND i.ended_at IS NULL WHERE i.state IS DISTINCT FROM d.state), "
        "closed AS (UPDATE machine_state_interval i SET ended_at = :now FROM changed c "
        "  WHERE i.equipment_id = c.id AND i.ended_at IS NULL RETURNING i.id) "
        "INSERT INTO machine_state_interval (equipment_id, state, started_at) "
        "SELECT c.id, c.state, :now FROM changed c WHERE (SELECT count(*) FROM closed) >= 0 "
        "RETURNING equipment_id, state")

    def track_machines(self, equipment_ids: list[str] | None = None) -> None:
        """Keep ``machine_state_interval`` and ``machine_cycle`` in step with this
        transaction's events (or, at start-up, with ``equipment_ids`` as they are).

        Only equipment that an event touched is looked at, in one statement, and a
        state that did not change writes nothing. A change closes the open interval
        and opens the next at the transaction's time (the events' ``at``) and is
        itself an event, ``MachineStateChanged``."""
        touched: set[str] = set(equipment_ids or ())
        requested: dict[str, list[int]] = {}  # cycles the loop started: equipment → jobs
        done: dict[str, list[int]] = {}  # slots that went DONE: equipment → jobs
        emptied: set[str] = set()
        finished: dict[str, list[int]] = {}  # pieces that ended: outcome → jobs
        for type_, p in self.events:
            if type_ == "JobFinished" and p.get("status") in ("COMPLETED", "SCRAPPED"):
                finished.setdefault(p["status"], []).append(p["id"])
            elif type_ == "SlotChanged":
                touched.add(p["equipmentId"])
                if p["status"] == "DONE":
                    done.setdefault(p["equipmentId"], []).append(p["currentJobId"])
                elif p["status"] == "EMPTY":
                    emptied.add(p["equipmentId"])
            elif type_ == "EquipmentChanged":
                touched.add(p["id"])
            elif p.get("positionType") == "ON_EQUIPMENT" and p.get("positionRefId"):
                equipment_id = p["positionRefId"].rsplit(":", 1)[0]
                touched.add(equipment_id)
                if type_ == "JobClaimed" and p.get("status") == "PROCESSING":
                    requested.setdefault(equipment_id, []).append(p["id"])
        if finished:
            self._count_outcomes(finished)
        if not touched:
            return
        for equipment_id, job_ids in done.items():
            self._end_cycles(equipment_id, job_ids)
        for equipment_id in emptied:  # pieces that left without DONE: their cycle is void
            self._abort_cycles_without_pieces(equipment_id)
        for equipment_id, job_ids in requested.items():
            self._request_cycles(equipment_id, job_ids)
        changed = sorted(self._track_states(sorted(touched)))
        at = serialize.iso(self.now)
        for equipment_id, state in changed:
            self.emit("MachineStateChanged", {"equipmentId": equipment_id, "state": state, "since": at})

    def _count_outcomes(self, finished: dict[str, list[int]]) -> None:
        """Finished pieces count in the cycles that processed them (quality)."""
        self.conn.execute(text(
            "UPDATE machine_cycle SET "
            "good_pieces = good_pieces + cardinality(ARRAY(SELECT unnest(job_ids) "
            "  INTERSECT SELECT unnest(CAST(:good AS bigint[])))), "
            "scrapped_pieces = scrapped_pieces + cardinality(ARRAY(SELECT unnest(job_ids) "
            "  INTERSECT SELECT unnest(CAST(:bad AS bigint[])))) "
            "WHERE job_ids && CAST(:all AS bigint[]) AND NOT aborted"),
            {"good": finished.get("COMPLETED", []), "bad": finished.get("SCRAPPED", []),
             "all": finished.get("COMPLETED", []) + finished.get("SCRAPPED", [])})

    def _track_states(self, equipment_ids: list[str]) -> list[tuple[str, str]]:
        """Run _TRACK_STATES_SQL as a statement prepared once per connection with a
        generic plan: planning it was most of its cost (it runs in most loop
        transactions)."""
        info = self.conn.info  # per DBAPI connection: survives pool check-outs
        if not info.get("track_states_prepared"):
            sql = (self._TRACK_STATES_SQL.replace(":ids", "$1::text[]")
                   .replace(":now", "$2::timestamptz"))
            self.conn.exec_driver_sql("SET plan_cache_mode = force_generic_plan")
            self.conn.exec_driver_sql(f"PREPARE linectl_track_states (text[], timestamptz) AS {sql}")
            info["track_states_prepared"] = True
        return [tuple(r) for r in self.conn.exec_driver_sql(
            "EXECUTE linectl_track_states (%(ids)s, %(now)s)", {"ids": equipment_ids, "now": self.now})]

    def _request_cycles(self, equipment_id: str, job_ids: list[int]) -> None:
        """The cycles the loop starts: one per piece, or one for all of them on a
        batch machine. A job started again (after a failed start) voids the cycle
        it had open."""
        self.conn.execute(text(
            "WITH v AS (UPDATE machine_cycle SET ended_at = :now, aborted = true "
            "  WHERE equipment_id = :e AND ended_at IS NULL AND job_ids && CAST(:j AS bigint[])) "
            "INSERT INTO machine_cycle (equipment_id, job_ids, requested_at) "
            "SELECT :e, CAST(:j AS bigint[]), :now FROM equipment WHERE id = :e AND batch "
            "UNION ALL SELECT :e, ARRAY[u], :now FROM equipment, unnest(CAST(:j AS bigint[])) AS u "
            "WHERE id = :e AND NOT batch"),
            {"e": equipment_id, "j": job_ids, "now": self.now})

    def _end_cycles(self, equipment_id: str, job_ids: list[int]) -> None:
        """A cycle ends when its pieces are done. It began when it was requested or,
        on a machine that runs its pieces one after another, when the cycle before
        it ended, whichever is later."""
        self.conn.execute(text(
            "UPDATE machine_cycle c SET ended_at = :now, started_at = GREATEST(c.requested_at, "
            "  (SELECT max(p.ended_at) FROM machine_cycle p WHERE p.equipment_id = :e "
            "   AND p.ended_at IS NOT NULL AND NOT p.aborted)) "
            "WHERE c.equipment_id = :e AND c.ended_at IS NULL AND c.job_ids && CAST(:j AS bigint[])"),
            {"e": equipment_id, "j": [j for j in job_ids if j is not None], "now": self.now})

    def abort_cycles(self, equipment_id: str, job_ids: list[int]) -> None:
        """The open cycles of these pieces were stopped (a fault, an abort) and are
        not run again: no cycle (docs/stats.md). A slot marked DONE later in the
        same transaction (to unload the piece) then ends nothing."""
        self.conn.execute(text(
            "UPDATE machine_cycle SET ended_at = :now, aborted = true "
            "WHERE equipment_id = :e AND ended_at IS NULL AND job_ids && CAST(:j AS bigint[])"),
            {"e": equipment_id, "j": job_ids, "now": self.now})

    def _abort_cycles_without_pieces(self, equipment_id: str) -> None:
        self.conn.execute(text(
            "UPDATE machine_cycle c SET ended_at = :now, aborted = true "
            "WHERE c.equipment_id = :e AND c.ended_at IS NULL AND NOT EXISTS ("
            "  SELECT 1 FROM equipment_slot s WHERE s.equipment_id = :e "
            "  AND s.current_job_id = ANY(c.job_ids))"),
            {"e": equipment_id, "now": self.now})
