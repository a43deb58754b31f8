"""Work-order and job transitions: each a conditional UPDATE that bumps the
row's version and records an event."""

from __future__ import annotations

from sqlalchemy import text

from shared import serialize
from shared.db.models import JOB_TERMINAL

from .base import JOB_TERMINAL_SQL, KEEP, Rejected, StateBase, as_json


class JobTransitions(StateBase):
    # -- work orders -----------------------------------------------------------------

    def create_work_order(self, *, code: str | None, product_id: str, route: list, quantity: int,
                          priority: int):
        row = self._one(
            "INSERT INTO work_order (code, product_id, route, quantity, priority) "
            "VALUES (COALESCE(:code, 'WO-' || to_char(now(), 'YYYYMMDD') || '-' || "
            "  next_work_order_number()), :p, CAST(:route AS jsonb), :q, :prio) "
            "ON CONFLICT (code) DO NOTHING RETURNING *",
            code=code, p=product_id, route=as_json(route), q=quantity, prio=priority)
        if row is None:
            raise Rejected("VALIDATION_ERROR", f"code: a work order {code!r} already exists")
        self.emit("WorkOrderCreated", serialize.work_order(row))
        return row

    def transition_order(self, order_id: int, expected: tuple[str, ...], status: str, event: str,
                         *, started: bool = False, finished: bool = False):
        return self._change(
            "UPDATE work_order SET status = :s, version = version + 1, updated_at = now(), "
            "started_at = CASE WHEN :started THEN now() ELSE started_at END, "
            "finished_at = CASE WHEN :finished THEN now() ELSE finished_at END "
            "WHERE id = :id AND status = ANY(:exp) RETURNING *",
            f"work order {order_id} is not {'/'.join(expected)}", event, serialize.work_order,
            id=order_id, s=status, exp=list(expected), started=started, finished=finished)

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
        """The order's pieces, each with its generated serial (a SCAN replaces it)."""
        rows = self._all(
            "INSERT INTO job (work_order_id, seq_no, status, position_type, serial) "
            "SELECT :o, n, 'PENDING', 'ON_DOCK', concat_ws('-', CAST(:line AS text), w.code, n) "
            "FROM work_order w, generate_series(1, :q) AS n WHERE w.id = :o RETURNING *",
            o=order_id, q=quantity, line=self.line_id)
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
            job_id, f"status NOT IN {JOB_TERMINAL_SQL} AND COALESCE(:slot, temp_slot_no) IS NOT NULL "
                    f"AND NOT EXISTS (SELECT 1 FROM job o WHERE o.temp_slot_no = COALESCE(:slot, job.temp_slot_no) "
                    f"  AND o.id <> job.id AND o.status NOT IN {JOB_TERMINAL_SQL})", {
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
            held=None if held_status is KEEP else held_status, patch=as_json(context_patch or {}),
            err=None if error_code is KEEP else error_code)

    def place_job(self, job_id: int, expected: tuple[str, ...], status: str, position_type: str,
                  position_ref: str | None, temp_slot_no: int | None, *, held_status=KEEP,
                  piece_at_dock: bool = True):
        """Put a job at a known position (an operator confirmed where the piece is).
        A job put back on the dock gives the piece its refill took back to the dock's
        count (docs/scheduler.md: the count may be high, never low), unless the dock
        is known to be empty (``piece_at_dock`` False: the refill found no piece)."""
        was = self.job(job_id)
        sets = {"status": ":st", "position_type": ":pt", "position_ref_id": ":pr",
                "temp_slot_no": ":slot", "error_code": "NULL"}
        if held_status is not KEEP:
            sets["held_status"] = ":held"
        row = self._update_job(
            job_id, "status = ANY(:exp)", sets, "JobMoved", f"job {job_id} is not {'/'.join(expected)}",
            exp=list(expected), st=status, pt=position_type, pr=position_ref, slot=temp_slot_no,
            held=None if held_status is KEEP else held_status)
        if piece_at_dock and position_type == "ON_DOCK" and was.position_type != "ON_DOCK":
            self.give_back_dock_pieces(1)
        return row

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

    def patch_job_context(self, job_id: int, patch: dict, *, serial: str | None = None):
        """``serial``: the piece's serial from now on (the code its SCAN read)."""
        sets = {"context": "context || CAST(:patch AS jsonb)"}
        if serial is not None:
            sets["serial"] = ":serial"
        return self._update_job(job_id, "TRUE", sets, "JobContextChanged", f"job {job_id} does not exist",
                                patch=as_json(patch), serial=serial)

    def give_serials(self) -> int:
        """Jobs without a serial (made before revision 0012) get their generated one."""
        return self.conn.execute(text(
            "UPDATE job SET serial = COALESCE(NULLIF(context->>'barcode', ''), "
            "  concat_ws('-', CAST(:line AS text), (SELECT code FROM work_order w WHERE w.id = job.work_order_id), "
            "  seq_no)) WHERE serial IS NULL"), {"line": self.line_id}).rowcount

    def complete_step(self, job_id: int, expected_step: int, next_step: int,
                      context_patch: dict | None = None, status: str = "QUEUED"):
        return self._update_job(
            job_id, f"step_index = :exp AND status NOT IN {JOB_TERMINAL_SQL}", {
                "step_index": ":next", "status": ":st",
                "context": "context || CAST(:patch AS jsonb)",
            }, "StepCompleted", f"job {job_id} is not at step {expected_step}",
            exp=expected_step, next=next_step, st=status, patch=as_json(context_patch or {}))

    def finish_job(self, job_id: int, terminal: str):
        """COMPLETED / SCRAPPED / CANCELLED. The order's count moves in the same
        statement, conditioned on the job's old state being non-terminal: a
        repeated or concurrent finish counts nothing. A job that ends on the robot
        where a refill put it gives its piece back to the dock's count: the piece
        may never have left the dock (a gripper fault moves nothing), and a count
        too high costs one robot move where one too low stalls the line."""
        if terminal not in JOB_TERMINAL:
            raise ValueError(terminal)
        job = self._one(
            f"WITH was AS (SELECT position_type FROM job WHERE id = :id), "  # the row before the update
            f"j AS (UPDATE job SET status = :t, held_status = NULL, temp_slot_no = NULL, "
            f"  position_type = 'OUT', position_ref_id = NULL, finished_at = :now, "
            f"  version = version + 1, updated_at = now() "
            f"  WHERE id = :id AND status NOT IN {JOB_TERMINAL_SQL} "
            f"  RETURNING *, (SELECT position_type FROM was) AS was_position), "
            f"o AS (UPDATE work_order SET "
            f"  completed_qty = work_order.completed_qty + CASE WHEN :t = 'COMPLETED' THEN 1 ELSE 0 END, "
            f"  scrapped_qty = work_order.scrapped_qty + CASE WHEN :t = 'SCRAPPED' THEN 1 ELSE 0 END, "
            f"  version = work_order.version + 1, updated_at = now() "
            f"  FROM j WHERE work_order.id = j.work_order_id AND :t <> 'CANCELLED' RETURNING work_order.id) "
            f"SELECT * FROM j", id=job_id, t=terminal, now=self.now)
        self._must(job, f"job {job_id} is already finished")
        if job.was_position == "ON_ROBOT" and self.taken_by_refill(job_id):
            self.give_back_dock_pieces(1)
        self.emit("JobFinished", serialize.job(job))
        if terminal != "CANCELLED":
            order = self.work_order(job.work_order_id)
            self.emit("WorkOrderChanged", serialize.work_order(order))
            self.complete_order_if_done(order.id)
        return job
