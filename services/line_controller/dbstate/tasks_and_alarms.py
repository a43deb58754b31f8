"""Tasks, alarms and manual actions: created, then moved through their states
by conditional updates."""

from __future__ import annotations

from collections.abc import Mapping

from shared import serialize
from shared.wire import camel_facts

from .base import JOB_TERMINAL_SQL, StateBase, as_json


class TasksAndAlarms(StateBase):
    # -- tasks -----------------------------------------------------------------------

    def create_task(self, kind: str, *, job_id: int | None, work_order_id: int | None = None,
                    equipment_id: str | None = None, slot_no: int | None = None,
                    params: dict | None = None, timeout_seconds: float = 120.0):
        row = self._one(
            "INSERT INTO task (kind, job_id, work_order_id, equipment_id, slot_no, params, deadline_at) "
            "VALUES (:k, :j, :o, :e, :s, CAST(:p AS jsonb), now() + make_interval(secs => :t)) RETURNING *",
            k=kind, j=job_id, o=work_order_id, e=equipment_id, s=slot_no, p=as_json(params or {}),
            t=timeout_seconds)
        self.emit("TaskCreated", serialize.task(row))
        return row

    def _task_transition(self, task_id: int, expected: str, status: str, event: str, sets: str = "",
                         **params):
        return self._change(
            f"UPDATE task SET status = :s{sets} WHERE id = :id AND status = :exp RETURNING *",
            f"task {task_id} is not {expected}", event, serialize.task,
            id=task_id, s=status, exp=expected, **params)

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
            f"AND NOT EXISTS (SELECT 1 FROM job j WHERE j.status IN {JOB_TERMINAL_SQL} AND j.id IN "
            f"  (SELECT CAST(x AS bigint) FROM jsonb_array_elements_text(t.params->'jobIds') AS x)) "
            f"RETURNING *", id=task_id, s="FAILED" if error else "SUCCEEDED",
            r=None if error else as_json(result or {}), c=error[0] if error else None,
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
                    task_id: int | None = None, facts: Mapping | None = None):
        """``facts``: what fills ``message``, kept so the page can say it in its reader's language."""
        row = self._one(
            "INSERT INTO alarm (code, severity, message, equipment_id, job_id, task_id, facts) "
            "VALUES (:c, :sev, :m, :e, :j, :t, CAST(:f AS jsonb)) RETURNING *",
            c=code, sev=severity, m=message, e=equipment_id, j=job_id, t=task_id,
            f=as_json(camel_facts(dict(facts or {}))))
        self.emit("AlarmRaised", serialize.alarm(row))
        return row

    def acknowledge_alarm(self, alarm_id: int, actor: str):
        return self._change(
            "UPDATE alarm SET status = 'ACKNOWLEDGED', acknowledged_at = now(), acknowledged_by = :a "
            "WHERE id = :id AND status = 'RAISED' RETURNING *", f"alarm {alarm_id} is not RAISED",
            "AlarmAcknowledged", serialize.alarm, id=alarm_id, a=actor)

    def resolve_alarm(self, alarm_id: int, actor: str):
        """RAISED/ACKNOWLEDGED → CLEARED, with who and when."""
        return self._change(
            "UPDATE alarm SET status = 'CLEARED', cleared_at = now(), cleared_by = :a "
            "WHERE id = :id AND status <> 'CLEARED' RETURNING *", f"alarm {alarm_id} is already cleared",
            "AlarmCleared", serialize.alarm, id=alarm_id, a=actor)

    def shelve_alarm(self, alarm_id: int, minutes: int, reason: str, actor: str):
        """RAISED/ACKNOWLEDGED → SHELVED until now + ``minutes``; shelving a shelved
        alarm again sets a new time and reason (it still returns to what it was)."""
        return self._change(
            "UPDATE alarm SET status = 'SHELVED', "
            "status_before_shelve = CASE WHEN status = 'SHELVED' THEN status_before_shelve ELSE status END, "
            "shelved_until = CAST(:now AS timestamptz) + make_interval(mins => :mins), "
            "shelve_reason = :r, shelved_by = :a, shelved_at = :now "
            "WHERE id = :id AND status IN ('RAISED', 'ACKNOWLEDGED', 'SHELVED') RETURNING *",
            f"alarm {alarm_id} is cleared", "AlarmShelved", serialize.alarm,
            id=alarm_id, mins=minutes, r=reason, a=actor, now=self.now)

    def unshelve_alarm(self, alarm_id: int, actor: str):
        return self._change(
            "UPDATE alarm SET status = status_before_shelve, status_before_shelve = NULL, "
            "shelved_until = NULL WHERE id = :id AND status = 'SHELVED' RETURNING *",
            f"alarm {alarm_id} is not SHELVED", "AlarmUnshelved",
            lambda row: {**serialize.alarm(row), "unshelvedBy": actor}, id=alarm_id)

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
                             alarm_id: int | None = None, context: dict | None = None,
                             facts: Mapping | None = None):
        """``facts``: what fills ``text``, kept so the page can say it in its reader's language."""
        row = self._one(
            "INSERT INTO manual_action (kind, text, choices, context, job_id, equipment_id, alarm_id, facts) "
            "VALUES (:k, :t, CAST(:ch AS jsonb), CAST(:ctx AS jsonb), :j, :e, :a, CAST(:f AS jsonb)) "
            "RETURNING *",
            k=kind, t=text_, ch=as_json(choices), ctx=as_json(context or {}), j=job_id, e=equipment_id,
            a=alarm_id, f=as_json(camel_facts(dict(facts or {}))))
        self.emit("ManualActionCreated", serialize.manual_action(row))
        return row

    def resolve_manual_action(self, action_id: int, resolution: str, actor: str, note: str | None):
        return self._change(
            "UPDATE manual_action SET status = 'RESOLVED', resolution = :r, note = :n, "
            "resolved_by = :a, resolved_at = now() WHERE id = :id AND status = 'OPEN' RETURNING *",
            f"manual action {action_id} is not OPEN", "ManualActionResolved", serialize.manual_action,
            id=action_id, r=resolution, n=note, a=actor)
