"""What the loop reads: single rows and the few lists its handlers need."""

from __future__ import annotations

from .base import JOB_TERMINAL_SQL, StateBase


class Reads(StateBase):

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

    def open_alarms(self, *, equipment_id: str | None = None, code: str | None = None):
        """Alarms not cleared yet, of one machine and/or of one code."""
        sql = "SELECT * FROM alarm WHERE status <> 'CLEARED'"
        if equipment_id is not None:
            sql += " AND equipment_id = :e"
        if code is not None:
            sql += " AND code = :c"
        return self._all(sql + " ORDER BY id", e=equipment_id, c=code)

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

    def failures_in_a_row(self, job_id: int, task) -> int:
        """How many of the job's concluded actions, up to ``task`` (just failed),
        failed one after another as it did: its kind, its error code."""
        rows = self._all(
            "SELECT kind, status, error_code FROM task WHERE id <= :t AND status IN ('SUCCEEDED','FAILED') "
            "AND (job_id = :j OR params->'jobIds' @> to_jsonb(:j)) ORDER BY id DESC LIMIT 100",
            t=task.id, j=job_id)
        same = 0
        for row in rows:
            if (row.kind, row.status, row.error_code) != (task.kind, "FAILED", task.error_code):
                break
            same += 1
        return same

    def taken_by_refill(self, job_id: int) -> bool:
        """Whether the newest task that moved (or was to move) the job is a refill:
        a job on the robot because of it came off the dock, not off the buffer."""
        row = self._one(
            "SELECT kind FROM task WHERE job_id = :j OR params->'jobIds' @> to_jsonb(:j) "
            "ORDER BY id DESC LIMIT 1", j=job_id)
        return row is not None and row.kind == "DOCK_TO_BUFFER"

    def machines_without_progress(self):
        """Per machine with cycles open: since when it has made no progress (the
        later of its oldest open cycle's request and its last cycle's end)."""
        return self._all(
            "SELECT o.equipment_id, GREATEST(o.since, (SELECT max(p.ended_at) FROM machine_cycle p "
            "  WHERE p.equipment_id = o.equipment_id AND p.ended_at IS NOT NULL)) AS since "
            "FROM (SELECT equipment_id, min(requested_at) AS since FROM machine_cycle "
            "      WHERE ended_at IS NULL GROUP BY equipment_id) o ORDER BY o.equipment_id")

    def overdue_tasks(self):
        return self._all("SELECT * FROM task WHERE status = 'RUNNING' AND deadline_at < now()")

    def timers(self):
        """For the tick (``tick_gate.next_due``): ``(watched, shelf, deadline)``.
        ``watched``: an order runs (the line is not ``IDLE``: line_tracking), so
        the controller's heartbeat is stamped; the first shelved alarm's end and the
        first running task's deadline, None for none."""
        row = self._one(
            "SELECT EXISTS (SELECT 1 FROM work_order WHERE status = 'RUNNING') AS watched,"
            " (SELECT min(shelved_until) FROM alarm WHERE status = 'SHELVED') AS shelf,"
            " (SELECT min(deadline_at) FROM task WHERE status = 'RUNNING') AS deadline")
        return row.watched, row.shelf, row.deadline

    def places_sent_work_since(self, moment, grace_seconds: float = 0.0) -> set[str | None]:
        """The machines (``None``: the buffer and the dock) that a task created or
        started at or after ``moment`` was sent to: what a picture of the PLC taken
        at ``moment`` cannot show yet. A task's times are its transaction's, and it
        reaches the PLC after the commit, the send and the hardware's own queue:
        ``grace_seconds`` before ``moment`` count too."""
        places: set[str | None] = set()
        for row in self._all("SELECT DISTINCT kind, equipment_id FROM task WHERE created_at >= :m"
                             " - make_interval(secs => :g) OR started_at >= :m - make_interval(secs => :g)",
                             m=moment, g=grace_seconds):
            places.add(row.equipment_id)
            if row.kind not in ("START_MACHINE", "ABORT_CYCLE"):  # the robot's: buffer or dock too
                places.add(None)
        return places

    def live_jobs(self):
        return self._all(f"SELECT * FROM job WHERE status NOT IN {JOB_TERMINAL_SQL} ORDER BY id")

    def all_slots(self):
        return self._all("SELECT * FROM equipment_slot ORDER BY equipment_id, slot_no")

    def all_equipment(self):
        return self._all("SELECT * FROM equipment ORDER BY id")

    def pieces_in_process(self) -> int:
        return self._one("SELECT count(*) AS n FROM job WHERE status = 'PROCESSING' "
                         "OR held_status = 'PROCESSING'").n

    def last_task_id(self) -> int:
        return self._one("SELECT COALESCE(MAX(id), 0) AS id FROM task").id

    def open_tasks(self):
        return self._all("SELECT * FROM task WHERE status IN ('PENDING','RUNNING') ORDER BY id")

    def buffer_occupancy(self) -> dict[int, int]:
        """slot → job id, from ``job.temp_slot_no`` of live jobs (the buffer has no table)."""
        rows = self._all(f"SELECT temp_slot_no, id FROM job WHERE temp_slot_no IS NOT NULL "
                         f"AND status NOT IN {JOB_TERMINAL_SQL} ORDER BY id")
        return {r.temp_slot_no: r.id for r in rows}
