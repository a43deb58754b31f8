"""DBState: the production state as the event loop sees and changes it.

Only the loop uses this class, one instance per loop transaction, and it is the
only place with SQL for the production tables. It exposes domain transitions,
not CRUD: each is a conditional ``UPDATE … WHERE <expected state>`` (the
conditions are defensive; the loop's serial handling is what keeps the state
consistent), every job change increments ``job.version``, and every change
records an event (type + the changed object, ``shared.serialize`` shape) that
the loop writes to ``event_log`` in the same transaction.

A condition that does not hold raises :class:`ConditionFailed`; nothing is
retried blindly: the loop rolls back and the caller re-reads.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import text
from sqlalchemy.engine import Connection

from shared import serialize
from shared.db.models import JOB_TERMINAL

_JOB_TERMINAL_SQL = "(" + ", ".join(f"'{s}'" for s in JOB_TERMINAL) + ")"
KEEP = object()  # "leave this column as it is"


class Rejected(Exception):
    """A command or event that the current state forbids; the transaction is rolled back."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class ConditionFailed(Rejected):
    """A conditional update matched no row: the state is not what was expected."""

    def __init__(self, message: str):
        super().__init__("INVALID_TRANSITION", message)


def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


class DBState:
    def __init__(self, conn: Connection, *, now: datetime | None = None,
                 routes: dict[int, list] | None = None):
        self.conn = conn
        self.now = now or datetime.now(UTC)
        self.events: list[tuple[str, dict]] = []
        # An order's route never changes after creation; the loop shares this cache.
        self._routes = routes if routes is not None else {}

    # -- plumbing ------------------------------------------------------------------

    def _all(self, sql: str, **params):
        return self.conn.execute(text(sql), params).fetchall()

    def _one(self, sql: str, **params):
        return self.conn.execute(text(sql), params).first()

    def _must(self, row, what: str):
        if row is None:
            raise ConditionFailed(what)
        return row

    def emit(self, type_: str, payload: dict) -> None:
        self.events.append((type_, payload))

    # -- reads ---------------------------------------------------------------------

    def job(self, job_id: int):
        return self._one("SELECT * FROM job WHERE id = :id", id=job_id)

    def work_order(self, order_id: int):
        return self._one("SELECT * FROM work_order WHERE id = :id", id=order_id)

    def route(self, order_id: int) -> list:
        if order_id not in self._routes:
            self._routes[order_id] = self._one("SELECT route FROM work_order WHERE id = :id",
                                               id=order_id).route
        return self._routes[order_id]

    def task(self, task_id: int):
        return self._one("SELECT * FROM task WHERE id = :id", id=task_id)

    def equipment(self, equipment_id: str):
        return self._one("SELECT * FROM equipment WHERE id = :id", id=equipment_id)

    def slots(self, equipment_id: str):
        return self._all("SELECT * FROM equipment_slot WHERE equipment_id = :e ORDER BY slot_no",
                         e=equipment_id)

    def slot(self, equipment_id: str, slot_no: int):
        return self._one("SELECT * FROM equipment_slot WHERE equipment_id = :e AND slot_no = :n",
                         e=equipment_id, n=slot_no)

    def earliest_occupied_slot(self, equipment_id: str):
        """The FIFO choice for a MachineDone without a usable slotNo."""
        return self._one(
            "SELECT * FROM equipment_slot WHERE equipment_id = :e AND status = 'OCCUPIED' "
            "ORDER BY occupied_at, slot_no LIMIT 1", e=equipment_id)

    def manual_action(self, action_id: int):
        return self._one("SELECT * FROM manual_action WHERE id = :id", id=action_id)

    def open_manual_actions(self, kinds: tuple[str, ...] | None = None, *,
                            equipment_id: str | None = None):
        sql = "SELECT * FROM manual_action WHERE status = 'OPEN'"
        if kinds:
            sql += " AND kind = ANY(:kinds)"
        if equipment_id is not None:
            sql += " AND equipment_id = :e"
        return self._all(sql + " ORDER BY id", kinds=list(kinds or ()), e=equipment_id)

    def open_alarms(self, *, equipment_id: str):
        return self._all("SELECT * FROM alarm WHERE equipment_id = :e AND status <> 'CLEARED' "
                         "ORDER BY id", e=equipment_id)

    def alarm(self, alarm_id: int):
        return self._one("SELECT * FROM alarm WHERE id = :id", id=alarm_id)

    def jobs_of_order(self, order_id: int, statuses: tuple[str, ...] | None = None):
        sql = "SELECT * FROM job WHERE work_order_id = :o"
        if statuses:
            sql += " AND status = ANY(:s)"
        return self._all(sql + " ORDER BY seq_no", o=order_id, s=list(statuses or ()))

    def running_tasks_of_job(self, job_id: int):
        return self._all(
            "SELECT * FROM task WHERE status IN ('PENDING','RUNNING') AND "
            "(job_id = :j OR params->'jobIds' @> to_jsonb(:j))", j=job_id)

    def overdue_tasks(self):
        return self._all("SELECT * FROM task WHERE status = 'RUNNING' AND deadline_at < now()")

    def live_jobs(self):
        return self._all(f"SELECT * FROM job WHERE status NOT IN {_JOB_TERMINAL_SQL} ORDER BY id")

    def all_slots(self):
        return self._all("SELECT * FROM equipment_slot ORDER BY equipment_id, slot_no")

    def all_equipment(self):
        return self._all("SELECT * FROM equipment ORDER BY id")

    def pieces_in_process(self) -> int:
        return self._one("SELECT count(*) AS n FROM job WHERE status = 'PROCESSING' "
                         "OR held_status = 'PROCESSING'").n

    def open_tasks(self):
        return self._all("SELECT * FROM task WHERE status IN ('PENDING','RUNNING') ORDER BY id")

    def buffer_occupancy(self) -> dict[int, int]:
        """slot → job id, from ``job.temp_slot_no`` of live jobs (the buffer has no table)."""
        rows = self._all(f"SELECT temp_slot_no, id FROM job WHERE temp_slot_no IS NOT NULL "
                         f"AND status NOT IN {_JOB_TERMINAL_SQL} ORDER BY id")
        return {r.temp_slot_no: r.id for r in rows}

    # -- work orders -----------------------------------------------------------------

    def create_work_order(self, *, code: str | None, product_id: str, route: list, quantity: int,
                          priority: int):
        row = self._one(
            "INSERT INTO work_order (code, product_id, route, quantity, priority) "
            "VALUES (COALESCE(:code, 'WO-' || to_char(now(), 'YYYYMMDD') || '-' || "
            "  nextval(pg_get_serial_sequence('work_order', 'id'))), :p, CAST(:route AS jsonb), :q, :prio) "
            "ON CONFLICT (code) DO NOTHING RETURNING *",
            code=code, p=product_id, route=_json(route), q=quantity, prio=priority)
        if row is None:
            raise Rejected("VALIDATION_ERROR", f"code: a work order {code!r} already exists")
        self.emit("WorkOrderCreated", serialize.work_order(row))
        return row

    def transition_order(self, order_id: int, expected: tuple[str, ...], status: str, event: str,
                         *, started: bool = False, finished: bool = False):
        row = self._must(self._one(
            "UPDATE work_order SET status = :s, version = version + 1, updated_at = now(), "
            "started_at = CASE WHEN :started THEN now() ELSE started_at END, "
            "finished_at = CASE WHEN :finished THEN now() ELSE finished_at END "
            "WHERE id = :id AND status = ANY(:exp) RETURNING *",
            id=order_id, s=status, exp=list(expected), started=started, finished=finished),
            f"work order {order_id} is not {'/'.join(expected)}")
        self.emit(event, serialize.work_order(row))
        return row

    def complete_order_if_done(self, order_id: int):
        """RUNNING/PAUSED → COMPLETED once every piece is completed or scrapped."""
        row = self._one(
            "UPDATE work_order SET status = 'COMPLETED', version = version + 1, updated_at = now(), "
            "finished_at = now() WHERE id = :id AND status IN ('RUNNING','PAUSED') "
            "AND completed_qty + scrapped_qty = quantity RETURNING *", id=order_id)
        if row is not None:
            self.emit("WorkOrderCompleted", serialize.work_order(row))
        return row

    # -- jobs ------------------------------------------------------------------------

    def create_jobs(self, order_id: int, quantity: int):
        rows = self._all(
            "INSERT INTO job (work_order_id, seq_no, status, position_type) "
            "SELECT :o, n, 'PENDING', 'ON_DOCK' FROM generate_series(1, :q) AS n RETURNING *",
            o=order_id, q=quantity)
        for r in rows:
            self.emit("JobCreated", serialize.job(r))
        return rows

    def _update_job(self, job_id: int, where: str, sets: dict, event: str, why: str, *,
                    with_: str = "", returning: str = "", before_event=None, **params):
        """One conditional job UPDATE. ``with_`` is a data-modifying CTE of the same
        transition (the slot side), so job and slot change in one round trip; if the
        job's condition fails the caller's transaction is rolled back as a whole."""
        assignments = ", ".join(f"{col} = {expr}" for col, expr in sets.items())
        row = self._must(self._one(
            f"{with_} UPDATE job SET {assignments}, version = version + 1, updated_at = now() "
            f"WHERE id = :id AND {where} RETURNING job.*{returning}", id=job_id, **params), why)
        if before_event is not None:
            before_event(row)
        self.emit(event, serialize.job(row))
        return row

    def _slot_event(self, equipment_id, slot_no, status, job_id):
        self.emit("SlotChanged", {"equipmentId": equipment_id, "slotNo": slot_no, "status": status,
                                  "currentJobId": job_id})

    def claim_job_for_action(self, job_id: int, expected_status: str, next_status: str,
                             position_type: str | None = None, position_ref: str | None = None,
                             temp_slot_no=KEEP):
        """Reserve a job for a hardware action (e.g. QUEUED → MOVING, ON_ROBOT)."""
        sets = {"status": ":next"}
        if position_type is not None:
            sets.update(position_type=":pt", position_ref_id=":pr")
        if temp_slot_no is not KEEP:
            sets["temp_slot_no"] = ":slot"
        return self._update_job(
            job_id, "status = :exp", sets, "JobClaimed",
            f"job {job_id} is not {expected_status}", exp=expected_status, next=next_status,
            pt=position_type, pr=position_ref,
            slot=None if temp_slot_no is KEEP else temp_slot_no)

    def move_job_to_equipment(self, job_id: int, from_position: str, equipment_id: str,
                              slot_no: int, status: str = "PROCESSING"):
        """The piece is on the machine: slot EMPTY → OCCUPIED and the job's position, together."""
        return self._update_job(
            job_id, "position_type = :from AND EXISTS (SELECT 1 FROM s)", {
                "status": ":st", "position_type": "'ON_EQUIPMENT'", "position_ref_id": ":ref",
            }, "JobMoved", f"job {job_id} is not {from_position} or slot {equipment_id}:{slot_no} is not EMPTY",
            with_="WITH s AS (UPDATE equipment_slot SET status = 'OCCUPIED', current_job_id = :id, "
                  "occupied_at = clock_timestamp(), updated_at = now() "
                  "WHERE equipment_id = :e AND slot_no = :n AND status = 'EMPTY' RETURNING slot_no)",
            before_event=lambda _: self._slot_event(equipment_id, slot_no, "OCCUPIED", job_id),
            **{"from": from_position}, st=status, ref=f"{equipment_id}:{slot_no}", e=equipment_id,
            n=slot_no)

    def move_job_to_buffer(self, job_id: int, slot_no: int | None = None, status: str | None = None):
        """Back to (or onto) buffer slot ``slot_no`` (default: its own ``temp_slot_no``),
        with ``status`` (default: unchanged); an equipment slot it held is emptied in
        the same statement. The buffer slot must not be held by another live job."""
        def freed(row):
            if row.freed_equipment_id is not None:
                self._slot_event(row.freed_equipment_id, row.freed_slot_no, "EMPTY", None)
        return self._update_job(
            job_id, f"status NOT IN {_JOB_TERMINAL_SQL} AND COALESCE(:slot, temp_slot_no) IS NOT NULL "
                    f"AND NOT EXISTS (SELECT 1 FROM job o WHERE o.temp_slot_no = COALESCE(:slot, job.temp_slot_no) "
                    f"  AND o.id <> job.id AND o.status NOT IN {_JOB_TERMINAL_SQL})", {
                "status": "COALESCE(:st, status)", "position_type": "'ON_BUFFER'",
                "position_ref_id": "CAST(COALESCE(:slot, temp_slot_no) AS text)",
                "temp_slot_no": "COALESCE(:slot, temp_slot_no)",
            }, "JobMoved", f"job {job_id} is finished, has no buffer slot, or its slot is taken",
            with_="WITH s AS (UPDATE equipment_slot SET status = 'EMPTY', current_job_id = NULL, "
                  "occupied_at = NULL, updated_at = now() "
                  "WHERE current_job_id = :id AND status IN ('OCCUPIED','DONE') RETURNING equipment_id, slot_no)",
            returning=", (SELECT equipment_id FROM s) AS freed_equipment_id, "
                      "(SELECT slot_no FROM s) AS freed_slot_no",
            before_event=freed, st=status, slot=slot_no)

    def set_job_status(self, job_id: int, expected: tuple[str, ...], status: str, *,
                       held_status=KEEP, context_patch: dict | None = None, error_code=KEEP,
                       event: str = "JobStatusChanged"):
        sets = {"status": ":st", "context": "context || CAST(:patch AS jsonb)"}
        if held_status is not KEEP:
            sets["held_status"] = ":held"
        if error_code is not KEEP:
            sets["error_code"] = ":err"
        return self._update_job(
            job_id, "status = ANY(:exp)", sets, event,
            f"job {job_id} is not {'/'.join(expected)}", exp=list(expected), st=status,
            held=None if held_status is KEEP else held_status, patch=_json(context_patch or {}),
            err=None if error_code is KEEP else error_code)

    def place_job(self, job_id: int, expected: tuple[str, ...], status: str, position_type: str,
                  position_ref: str | None, temp_slot_no: int | None, *, held_status=KEEP):
        """Put a job at a known position (an operator confirmed where the piece is)."""
        sets = {"status": ":st", "position_type": ":pt", "position_ref_id": ":pr",
                "temp_slot_no": ":slot", "error_code": "NULL"}
        if held_status is not KEEP:
            sets["held_status"] = ":held"
        return self._update_job(
            job_id, "status = ANY(:exp)", sets, "JobMoved", f"job {job_id} is not {'/'.join(expected)}",
            exp=list(expected), st=status, pt=position_type, pr=position_ref, slot=temp_slot_no,
            held=None if held_status is KEEP else held_status)

    def slot_done(self, equipment_id: str, slot_no: int, job_id: int):
        """The machine is done with the piece: slot OCCUPIED → DONE, and the job
        PROCESSING → WAITING_UNLOAD (a held PAUSED/SUSPENDED job keeps its status and
        returns to WAITING_UNLOAD), in one statement."""
        return self._update_job(
            job_id, "(status = 'PROCESSING' OR held_status = 'PROCESSING') AND EXISTS (SELECT 1 FROM s)", {
                "status": "CASE WHEN status = 'PROCESSING' THEN 'WAITING_UNLOAD' ELSE status END",
                "held_status": "CASE WHEN status = 'PROCESSING' THEN held_status ELSE 'WAITING_UNLOAD' END",
            }, "JobStatusChanged", f"job {job_id} is not processing on {equipment_id}:{slot_no}",
            with_="WITH s AS (UPDATE equipment_slot SET status = 'DONE', updated_at = now() "
                  "WHERE equipment_id = :e AND slot_no = :n AND status = 'OCCUPIED' "
                  "AND current_job_id = :id RETURNING slot_no)",
            before_event=lambda _: self._slot_event(equipment_id, slot_no, "DONE", job_id),
            e=equipment_id, n=slot_no)

    def patch_job_context(self, job_id: int, patch: dict):
        return self._update_job(job_id, "TRUE", {"context": "context || CAST(:patch AS jsonb)"},
                                "JobContextChanged", f"job {job_id} does not exist",
                                patch=_json(patch))

    def complete_step(self, job_id: int, expected_step: int, next_step: int,
                      context_patch: dict | None = None, status: str = "QUEUED"):
        return self._update_job(
            job_id, f"step_index = :exp AND status NOT IN {_JOB_TERMINAL_SQL}", {
                "step_index": ":next", "status": ":st",
                "context": "context || CAST(:patch AS jsonb)",
            }, "StepCompleted", f"job {job_id} is not at step {expected_step}",
            exp=expected_step, next=next_step, st=status, patch=_json(context_patch or {}))

    def finish_job(self, job_id: int, terminal: str):
        """COMPLETED / SCRAPPED / CANCELLED. The order's count moves in the same
        statement, conditioned on the job's old state being non-terminal: a
        repeated or concurrent finish counts nothing."""
        if terminal not in JOB_TERMINAL:
            raise ValueError(terminal)
        job = self._one(
            f"WITH j AS (UPDATE job SET status = :t, held_status = NULL, temp_slot_no = NULL, "
            f"  position_type = 'OUT', position_ref_id = NULL, finished_at = :now, "
            f"  version = version + 1, updated_at = now() "
            f"  WHERE id = :id AND status NOT IN {_JOB_TERMINAL_SQL} RETURNING *), "
            f"o AS (UPDATE work_order SET "
            f"  completed_qty = work_order.completed_qty + CASE WHEN :t = 'COMPLETED' THEN 1 ELSE 0 END, "
            f"  scrapped_qty = work_order.scrapped_qty + CASE WHEN :t = 'SCRAPPED' THEN 1 ELSE 0 END, "
            f"  version = work_order.version + 1, updated_at = now() "
            f"  FROM j WHERE work_order.id = j.work_order_id AND :t <> 'CANCELLED' RETURNING work_order.id) "
            f"SELECT * FROM j", id=job_id, t=terminal, now=self.now)
        self._must(job, f"job {job_id} is already finished")
        self.emit("JobFinished", serialize.job(job))
        if terminal != "CANCELLED":
            order = self.work_order(job.work_order_id)
            self.emit("WorkOrderChanged", serialize.work_order(order))
            self.complete_order_if_done(order.id)
        return job

    # -- equipment -------------------------------------------------------------------

    def set_equipment_slot(self, equipment_id: str, slot_no: int, expected_state, next_state: str,
                           job_id: int | None):
        expected = [expected_state] if isinstance(expected_state, str) else list(expected_state)
        row = self._must(self._one(
            "UPDATE equipment_slot SET status = :next, current_job_id = :job, updated_at = now(), "
            "occupied_at = CASE WHEN :next = 'EMPTY' THEN NULL "
            "  WHEN status = 'EMPTY' THEN clock_timestamp() ELSE occupied_at END "
            "WHERE equipment_id = :e AND slot_no = :n AND status = ANY(:exp) RETURNING *",
            e=equipment_id, n=slot_no, exp=expected, next=next_state, job=job_id),
            f"slot {equipment_id}:{slot_no} is not {'/'.join(expected)}")
        self.emit("SlotChanged", serialize.slot(row))
        return row

    def set_equipment_status(self, equipment_id: str, status: str):
        row = self._must(self._one(
            "UPDATE equipment SET status = :s, version = version + 1, updated_at = now() "
            "WHERE id = :id AND status <> :s RETURNING *", id=equipment_id, s=status),
            f"equipment {equipment_id} is already {status}")
        self.emit("EquipmentChanged", {"id": row.id, "status": row.status})
        return row

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

    def _abort_cycles_without_pieces(self, equipment_id: str) -> None:
        self.conn.execute(text(
            "UPDATE machine_cycle c SET ended_at = :now, aborted = true "
            "WHERE c.equipment_id = :e AND c.ended_at IS NULL AND NOT EXISTS ("
            "  SELECT 1 FROM equipment_slot s WHERE s.equipment_id = :e "
            "  AND s.current_job_id = ANY(c.job_ids))"),
            {"e": equipment_id, "now": self.now})

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
        """A refill that moved nothing: its piece is still at the dock."""
        self._dock("UPDATE dock SET pieces_waiting = pieces_waiting + :n, updated_at = now() "
                   "WHERE id = 1 AND pieces_waiting IS NOT NULL RETURNING pieces_waiting", n=count)

    # -- tasks -----------------------------------------------------------------------

    def create_task(self, kind: str, *, job_id: int | None, work_order_id: int | None = None,
                    equipment_id: str | None = None, slot_no: int | None = None,
                    params: dict | None = None, timeout_seconds: float = 120.0):
        row = self._one(
            "INSERT INTO task (kind, job_id, work_order_id, equipment_id, slot_no, params, deadline_at) "
            "VALUES (:k, :j, :o, :e, :s, CAST(:p AS jsonb), now() + make_interval(secs => :t)) RETURNING *",
            k=kind, j=job_id, o=work_order_id, e=equipment_id, s=slot_no, p=_json(params or {}),
            t=timeout_seconds)
        self.emit("TaskCreated", serialize.task(row))
        return row

    def _task_transition(self, task_id: int, expected: str, status: str, event: str, sets: str = "",
                         **params):
        row = self._must(self._one(
            f"UPDATE task SET status = :s{sets} WHERE id = :id AND status = :exp RETURNING *",
            id=task_id, s=status, exp=expected, **params), f"task {task_id} is not {expected}")
        self.emit(event, serialize.task(row))
        return row

    def start_task(self, task_id: int):
        return self._task_transition(task_id, "PENDING", "RUNNING", "TaskStarted",
                                     ", started_at = now()")

    def conclude_task(self, task_id: int, *, result: dict | None = None,
                      error: tuple[str, str | None] | None = None):
        """RUNNING → SUCCEEDED (``result``) or FAILED (``error``), only while none of
        its jobs is terminal. None when that does not hold: the result is stale."""
        row = self._one(
            f"UPDATE task t SET status = :s, finished_at = now(), result = CAST(:r AS jsonb), "
            f"error_code = :c, error_message = :m WHERE t.id = :id AND t.status = 'RUNNING' "
            f"AND NOT EXISTS (SELECT 1 FROM job j WHERE j.status IN {_JOB_TERMINAL_SQL} AND j.id IN "
            f"  (SELECT CAST(x AS bigint) FROM jsonb_array_elements_text(t.params->'jobIds') AS x)) "
            f"RETURNING *", id=task_id, s="FAILED" if error else "SUCCEEDED",
            r=None if error else _json(result or {}), c=error[0] if error else None,
            m=error[1] if error else None)
        if row is not None:
            self.emit("TaskFailed" if error else "TaskSucceeded", serialize.task(row))
        return row

    def abandon_task(self, task_id: int, error_code: str, error_message: str):
        """An open task whose outcome nobody will report any more → FAILED (a late
        result is then stale); None when it was already closed."""
        row = self._one(
            "UPDATE task SET status = 'FAILED', finished_at = now(), error_code = :c, "
            "error_message = :m WHERE id = :id AND status IN ('PENDING','RUNNING') RETURNING *",
            id=task_id, c=error_code, m=error_message)
        if row is not None:
            self.emit("TaskFailed", serialize.task(row))
        return row

    def cancel_open_tasks(self, job_ids: list[int]):
        rows = self._all(
            "UPDATE task SET status = 'CANCELLED', finished_at = now() "
            "WHERE status IN ('PENDING','RUNNING') AND job_id = ANY(:j) RETURNING *", j=job_ids)
        for r in rows:
            self.emit("TaskCancelled", serialize.task(r))
        return rows

    # -- alarms and manual actions ---------------------------------------------------

    def raise_alarm(self, code: str, message: str, *, severity: str = "ERROR",
                    equipment_id: str | None = None, job_id: int | None = None,
                    task_id: int | None = None):
        row = self._one(
            "INSERT INTO alarm (code, severity, message, equipment_id, job_id, task_id) "
            "VALUES (:c, :sev, :m, :e, :j, :t) RETURNING *",
            c=code, sev=severity, m=message, e=equipment_id, j=job_id, t=task_id)
        self.emit("AlarmRaised", serialize.alarm(row))
        return row

    def acknowledge_alarm(self, alarm_id: int, actor: str):
        row = self._must(self._one(
            "UPDATE alarm SET status = 'ACKNOWLEDGED', acknowledged_at = now(), acknowledged_by = :a "
            "WHERE id = :id AND status = 'RAISED' RETURNING *", id=alarm_id, a=actor),
            f"alarm {alarm_id} is not RAISED")
        self.emit("AlarmAcknowledged", serialize.alarm(row))
        return row

    def resolve_alarm(self, alarm_id: int, actor: str):
        """RAISED/ACKNOWLEDGED → CLEARED, with who and when."""
        row = self._must(self._one(
            "UPDATE alarm SET status = 'CLEARED', cleared_at = now(), cleared_by = :a "
            "WHERE id = :id AND status <> 'CLEARED' RETURNING *", id=alarm_id, a=actor),
            f"alarm {alarm_id} is already cleared")
        self.emit("AlarmCleared", serialize.alarm(row))
        return row

    def shelve_alarm(self, alarm_id: int, minutes: int, reason: str, actor: str):
        """RAISED/ACKNOWLEDGED → SHELVED until now + ``minutes``; shelving a shelved
        alarm again sets a new time and reason (it still returns to what it was)."""
        row = self._must(self._one(
            "UPDATE alarm SET status = 'SHELVED', "
            "status_before_shelve = CASE WHEN status = 'SHELVED' THEN status_before_shelve ELSE status END, "
            "shelved_until = CAST(:now AS timestamptz) + make_interval(mins => :mins), "
            "shelve_reason = :r, shelved_by = :a, shelved_at = :now "
            "WHERE id = :id AND status IN ('RAISED', 'ACKNOWLEDGED', 'SHELVED') RETURNING *",
            id=alarm_id, mins=minutes, r=reason, a=actor, now=self.now),
            f"alarm {alarm_id} is cleared")
        self.emit("AlarmShelved", serialize.alarm(row))
        return row

    def unshelve_alarm(self, alarm_id: int, actor: str):
        row = self._must(self._one(
            "UPDATE alarm SET status = status_before_shelve, status_before_shelve = NULL, "
            "shelved_until = NULL WHERE id = :id AND status = 'SHELVED' RETURNING *", id=alarm_id),
            f"alarm {alarm_id} is not SHELVED")
        self.emit("AlarmUnshelved", {**serialize.alarm(row), "unshelvedBy": actor})
        return row

    def expire_shelves(self):
        """Shelved alarms whose time is up return to what they were."""
        rows = self._all(
            "UPDATE alarm SET status = status_before_shelve, status_before_shelve = NULL, "
            "shelved_until = NULL WHERE status = 'SHELVED' AND shelved_until <= :now RETURNING *",
            now=self.now)
        for row in sorted(rows, key=lambda r: r.id):
            self.emit("AlarmUnshelved", {**serialize.alarm(row), "unshelvedBy": "expiry"})
        return rows

    def create_manual_action(self, kind: str, text_: str, choices: list[str], *,
                             job_id: int | None = None, equipment_id: str | None = None,
                             alarm_id: int | None = None, context: dict | None = None):
        row = self._one(
            "INSERT INTO manual_action (kind, text, choices, context, job_id, equipment_id, alarm_id) "
            "VALUES (:k, :t, CAST(:ch AS jsonb), CAST(:ctx AS jsonb), :j, :e, :a) RETURNING *",
            k=kind, t=text_, ch=_json(choices), ctx=_json(context or {}), j=job_id, e=equipment_id,
            a=alarm_id)
        self.emit("ManualActionCreated", serialize.manual_action(row))
        return row

    def resolve_manual_action(self, action_id: int, resolution: str, actor: str, note: str | None):
        row = self._must(self._one(
            "UPDATE manual_action SET status = 'RESOLVED', resolution = :r, note = :n, "
            "resolved_by = :a, resolved_at = now() WHERE id = :id AND status = 'OPEN' RETURNING *",
            id=action_id, r=resolution, n=note, a=actor), f"manual action {action_id} is not OPEN")
        self.emit("ManualActionResolved", serialize.manual_action(row))
        return row

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
        the audit row of a command. Returns the frames, or None when the message id
        was already handled (a duplicate: the caller rolls back, nothing changes).
        The machine-state rollup follows the events first (:meth:`track_machines`).

        The duplicate check comes last on purpose: duplicates are rare, and checking
        here instead of before the handler saves a round trip per message."""
        self.track_machines()
        frames = self._frames(first_seq, tx_id)
        ctes, params = [], {"frames": _json(frames), "tx": tx_id, "at": self.now,
                            "mid": msg.id if msg is not None else None}
        guard = ""
        if msg is not None:
            ctes.append(self._RECORD)
            guard = " WHERE EXISTS (SELECT 1 FROM m)"
            params.update(id=msg.id, type=msg.type, cat=msg.category, payload=_json(msg.payload),
                          corr=msg.correlation_id, actor=msg.actor, created=msg.created_at,
                          status=status, result=None if result is None else _json(result),
                          ecode=error[0] if error else None, emsg=error[1] if error else None)
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
                          a_outcome=audit["outcome"], a_detail=_json(audit.get("detail") or {}))
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
            {"id": msg.id, "t": msg.type, "c": msg.category, "p": _json(msg.payload),
             "corr": msg.correlation_id, "a": msg.actor, "at": msg.created_at})

