"""Restart recovery (seed 004, 恢复策略): the start-up check, and an action whose
outcome a restart made unknown. What an answer does: ``recovery_answers``.

A task the hardware service still holds or has answered (``knownActions`` in
the start-up PLC reading) is no question: it stays RUNNING and its result,
which comes or is already queued, concludes it as usual. Only tasks the
hardware does not know (it restarted too, or was unreachable) are in question.
Of those, an action that is harmless to repeat with its piece still in place
(``consistency_checks.SAFE_TO_REPEAT``: a SCAN) is sent again, with no question.

``RecoveryCheck`` is the loop's first message after a start. It compares the
DB with itself and with the PLC (``consistency_checks.find_inconsistencies``:
machines, buffer sensors, the dock's count) and turns every disagreement into
held jobs (SUSPENDED, ``held_status`` kept), an alarm and a manual action whose
choices are ``consistency_checks.CHOICES[kind]``. A RUNNING task in question is
closed (FAILED, ``RECOVERY_OUTCOME_UNKNOWN``): no result will be accepted for
it any more, so the robot is free, and the operator says what happened.
Nothing is guessed and nothing is replayed from logs.
"""

from __future__ import annotations

import logging
from datetime import datetime

from shared import events as ev
from shared.db.models import JOB_HELD, JOB_TERMINAL

from .. import consistency_checks as r
from .. import messages as m
from ..job_lifecycle import restore_job

log = logging.getLogger(__name__)

OUTCOME_UNKNOWN = "RECOVERY_OUTCOME_UNKNOWN"
# A closed task whose action is sent again (safe to repeat): its failure code.
REPEATED = "OUTCOME_UNKNOWN_REPEATED"

# What each answer does, appended to the action's text so the page can show it.
CHOICE_HELP = {
    r.SLOT_MISMATCH: "CONFIRM: the job's record is right (the slot follows it); PIECE_ON_MACHINE: "
                     "the piece is in that slot (its cycle runs again); PIECE_REMOVED / SCRAP: the "
                     "piece is out of the cell and counts as scrap.",
    r.DUPLICATE_BUFFER_SLOT: "CONFIRM: keep the records; PIECE_REMOVED / SCRAP: the pieces are out "
                             "of the cell and count as scrap.",
    r.BUFFER_SLOT_OUT_OF_RANGE: "CONFIRM: keep the record; PIECE_REMOVED / SCRAP: the piece is out "
                                "of the cell and counts as scrap.",
    r.MACHINE_IDLE_BUT_DB_RUNNING: "CONFIRM: the cycle did not finish (it is started again); "
                                   "CYCLE_DONE: it finished (the pieces wait for unloading); "
                                   "PIECE_REMOVED / SCRAP: the pieces count as scrap.",
    r.MACHINE_RUNNING_BUT_DB_IDLE: "CONFIRM once the machine has stopped; it takes no new piece before.",
    r.TASK_OUTCOME_UNKNOWN: "CONFIRM: the action did not happen (the piece is where it was before); "
                            "ACTION_DONE: it finished; PIECE_REMOVED / SCRAP: the piece is out of "
                            "the cell and counts as scrap.",
    r.PLC_UNREACHABLE: "CONFIRM once the machines have been checked by hand.",
    r.BUFFER_PIECE_MISSING: "CONFIRM: the piece is on the slot after all (the job goes on); "
                            "PIECE_REMOVED / SCRAP: the piece is out of the cell and counts as scrap.",
    r.BUFFER_PIECE_UNKNOWN: "CONFIRM once the piece has been taken off the slot by hand; nothing "
                            "is put on that slot before.",
    r.DOCK_COUNT_MISMATCH: "The line follows the PLC's count. CONFIRM once the cell has been "
                           "checked for pieces the line does not know (on the buffer, a machine, "
                           "the robot).",
    r.MACHINE_PIECE_MISSING: "CONFIRM: the piece is in the slot after all (the job goes on); "
                             "PIECE_UNLOADED: it is on its buffer slot (the robot unloaded it; a "
                             "finished cycle's step is done, an unfinished one is done again later); "
                             "PIECE_REMOVED / SCRAP: the piece is out of the cell and counts as scrap.",
}


def read_plc(plc_state) -> dict | None:
    """``plc_state()`` (the hardware's reading) if it could be read and the PLC is connected, else None."""
    if plc_state is None:
        return None
    try:
        state = plc_state()
    except Exception as exc:  # the hardware service is not there (yet)
        log.warning("recovery: the PLC state could not be read: %s", exc)
        return None
    return state if (state or {}).get("connected") else None


def recovery_check_message(state: dict | None, tasks_up_to: int | None = None) -> m.EventLoopMessage:
    """The loop's RecoveryCheck message, carrying the PLC's state (None: not read)."""
    payload = {"plcState": state} if tasks_up_to is None else {"plcState": state, "tasksUpTo": tasks_up_to}
    return m.new_message("RecoveryCheck", payload, actor="recovery")


def _check_key(inc: r.Inconsistency) -> str:
    """Identifies a finding, so a second restart does not open the same action twice."""
    extra = ",".join(f"{k}={v}" for k, v in sorted(inc.context.items()))
    return f"{inc.kind}|{','.join(map(str, inc.job_ids))}|{inc.equipment_id or ''}|{inc.task_id or ''}|{extra}"


def _task_rows(tasks: dict) -> list:
    return [r.TaskRow(t.id, t.kind, t.status, t.job_id, t.equipment_id) for t in tasks.values()]


def _tasks_in_question(evt: m.RecoveryCheck, db) -> dict:
    """The open tasks whose outcome nobody will report: id → task."""
    open_tasks = {t.id: t for t in db.open_tasks()}
    if evt.hardware_started_at:
        # A hardware restart mid-run: only the actions it lost are in question.
        since = evt.hardware_started
        open_tasks = {i: t for i, t in open_tasks.items() if t.started_at and t.started_at < since}
        if evt.accepted_by_earlier is not None:
            # What no earlier instance accepted never reached it: the request waits in
            # the queue for the new one (or was answered NOT_EXECUTED): it reports.
            earlier = set(evt.accepted_by_earlier)
            open_tasks = {i: t for i, t in open_tasks.items() if str(i) in earlier}
        return open_tasks
    if evt.tasks_up_to is not None:  # a later task started after the hardware was read
        open_tasks = {i: t for i, t in open_tasks.items() if i <= evt.tasks_up_to}
    known = (evt.plc_state or {}).get("knownActions") or {}
    reported = {*known.get("open", ()), *known.get("answered", ())}
    # The hardware still holds these, or has published their result (waiting in
    # the queue behind this message): their outcome is not unknown, it comes.
    return {i: t for i, t in open_tasks.items() if str(i) not in reported}


def _find(evt: m.RecoveryCheck, ctx, open_tasks: dict) -> list[r.Inconsistency]:
    db = ctx.db
    if evt.hardware_started_at:
        # Only the lost tasks: the line's state was consistent a message ago, and a PLC
        # read taken before this message would race the loop's own updates.
        return r.find_inconsistencies([], [], _task_rows(open_tasks), {"connected": True, "equipment": []},
                                      ctx.layout.buffer_slots, equipment_running=[])
    jobs, slots, running = _db_rows(db)
    return r.find_inconsistencies(jobs, slots, _task_rows(open_tasks), evt.plc_state,
                                  ctx.layout.buffer_slots, equipment_running=running,
                                  **_cell_records(db))


def _cell_records(db) -> dict:
    """What the buffer and dock checks compare with the PLC beside the job rows."""
    dock = db.dock_record()
    return {"buffer_busy": db.buffer_slots_unsettled(), "machine_busy": db.machine_slots_unsettled(),
            "dock": None if dock is None else r.DockRecord(dock.pieces, dock.may_have_left)}


def _ask(db, inc: r.Inconsistency, key: str, open_tasks: dict) -> int:
    """One finding → its jobs held (its task closed), an alarm and a manual action; the action's id."""
    job_ids = list(inc.job_ids)
    if inc.task_id is not None:
        task = open_tasks[inc.task_id]
        params = task.params or {}
        job_ids += [j for j in params.get("jobIds", []) + list((params.get("jobs") or {}).values())
                    if j is not None and j not in job_ids]
        db.abandon_task(task.id, OUTCOME_UNKNOWN, "a restart (line controller or hardware "
                        "service) came before the hardware reported this action; an operator "
                        "says what happened")
    for job_id in job_ids:
        _hold(db, job_id)
    if inc.kind == r.MACHINE_RUNNING_BUT_DB_IDLE:
        equipment = db.equipment(inc.equipment_id)
        if equipment is not None and equipment.status != "FAULT":
            db.set_equipment_status(equipment.id, "FAULT")  # no new piece until confirmed
    alarm = db.raise_alarm(inc.kind, inc.text, equipment_id=inc.equipment_id,
                           job_id=job_ids[0] if job_ids else None, task_id=inc.task_id, facts=inc.facts)
    return db.create_manual_action(
        inc.kind, f"{inc.text} {CHOICE_HELP[inc.kind]}", list(inc.choices),
        job_id=job_ids[0] if len(job_ids) == 1 else None, equipment_id=inc.equipment_id,
        alarm_id=alarm.id, facts={**inc.facts, "job_ids": job_ids},
        context={**inc.context, "checkKey": key, "jobIds": job_ids, "taskId": inc.task_id}).id


def ask(db, inc: r.Inconsistency, open_tasks: dict) -> int:
    """Ask about one finding (also outside a recovery check: an action whose outcome
    the hardware could not see); the action's id."""
    return _ask(db, inc, _check_key(inc), open_tasks)


def _ask_what_is_new(db, found: list[r.Inconsistency], open_tasks: dict) -> list[int]:
    """An action for each finding not already asked about; the new actions' ids."""
    asked = {(a.context or {}).get("checkKey") for a in db.open_manual_actions() if r.is_recovery(a.kind)}
    created = []
    for inc in found:
        key = _check_key(inc)
        if key not in asked:
            asked.add(key)
            created.append(_ask(db, inc, key, open_tasks))
    return created


def _db_rows(db):
    jobs = [r.JobRow(j.id, j.status, j.position_type, j.position_ref_id, j.temp_slot_no)
            for j in db.live_jobs()]
    slots = [r.SlotRow(s.equipment_id, s.slot_no, s.status, s.current_job_id) for s in db.all_slots()]
    running = [e.id for e in db.all_equipment() if e.status == "RUNNING"]
    return jobs, slots, running


SENDING_GRACE_SECONDS = 1.0  # how long a committed task may take to reach the PLC


def check_against_plc(db, layout, plc_state: dict, *, while_sending: bool) -> dict:
    """The PLC answers again after a lost connection (it may have restarted, and a
    restarted PLC forgot its cycles): the start-up checks of the records against
    what it holds now. Tasks are left out: an action in flight is reported by the
    hardware service itself (not sent, or of unknown outcome).

    The picture was read before this message reached the loop, and the loop may
    have sent work since (a new hardware instance's first read races the starts
    the loop sends it): what that work touched is left out, the picture cannot
    show it yet (``while_sending``: with a grace for the way to the PLC). While
    the PLC was away the loop sent nothing, so a real reconnect's picture is whole."""
    jobs, slots, running = _db_rows(db)
    found = r.find_inconsistencies(jobs, slots, [], plc_state, layout.buffer_slots,
                                   equipment_running=running, **_cell_records(db))
    observed = _observed_at(plc_state)
    if observed is not None:
        moved_on = db.places_sent_work_since(  # None: the robot's (buffer, dock)
            observed, SENDING_GRACE_SECONDS if while_sending else 0.0)
        found = [inc for inc in found if inc.equipment_id not in moved_on]
    created = _ask_what_is_new(db, found, {})
    _follow_dock(db, plc_state)
    db.emit("RecoveryChecked", {"inconsistencies": len(found), "manualActionIds": created,
                                "plcConnected": True, "trigger": "PlcConnection"})
    return {"inconsistencies": len(found), "manualActionIds": created}


def _observed_at(plc_state: dict):
    """When the hardware read the picture (its ``observedAt``), or None if it does not say."""
    raw = plc_state.get("observedAt")
    try:
        moment = datetime.fromisoformat(raw) if isinstance(raw, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def recovery_check(evt: m.RecoveryCheck, ctx):
    db = ctx.db
    ctx.target = ("recovery", None)
    open_tasks = _tasks_in_question(evt, db)
    sensors = None if evt.hardware_started_at else r.buffer_sensors(evt.plc_state)
    for task_id in [i for i, t in open_tasks.items() if _repeat_if_safe(db, t, sensors)]:
        del open_tasks[task_id]
    found = _find(evt, ctx, open_tasks)
    created = _ask_what_is_new(db, found, open_tasks)
    if not evt.hardware_started_at:
        _follow_dock(db, evt.plc_state)
    db.emit("RecoveryChecked", {"inconsistencies": len(found), "manualActionIds": created,
                                "plcConnected": bool((evt.plc_state or {}).get("connected"))})
    return {"inconsistencies": len(found), "manualActionIds": created}


def _follow_dock(db, plc_state) -> None:
    """The dock's count follows the PLC's reading (after it was compared with the record)."""
    dock = (plc_state or {}).get("dock")
    if dock is not None and plc_state.get("connected"):
        db.observe_dock(dock["pieces"], plc_state.get("observedAt"))


def _repeat_if_safe(db, task, sensors) -> bool:
    """Close a task whose outcome is unknown and put its job back, so the scheduler
    sends the action again, when that is harmless (``consistency_checks.safe_to_repeat``:
    ``sensors``, the PLC's buffer sensors where read); False (nothing done) otherwise."""
    if task.kind not in r.SAFE_TO_REPEAT:
        return False
    params = task.params or {}
    job_ids = params.get("jobIds") or []
    job = db.job(job_ids[0]) if len(job_ids) == 1 else None
    before = (params.get("before") or {}).get(str(job.id)) if job is not None else None
    row = None if job is None else r.JobRow(job.id, job.status, job.position_type, job.position_ref_id,
                                            job.temp_slot_no)
    task_row = r.TaskRow(task.id, task.kind, task.status, task.job_id, task.equipment_id)
    if before is None or not r.safe_to_repeat(task_row, row, before.get("tempSlotNo"), sensors):
        return False
    db.abandon_task(task.id, REPEATED, "its outcome is unknown after a restart; it is harmless to "
                    "repeat and its piece is in place, so it is sent again")
    if job.status in JOB_HELD:  # held meanwhile: back to its earlier status when released
        restore_job(db, job.id, before, status=job.status, held_status=before["status"])
    else:
        restore_job(db, job.id, before, status=before["status"], held_status=None)
    db.emit("ActionRepeated", {"taskId": task.id, "kind": task.kind, "jobIds": job_ids})
    return True


def outcome_unknown(db, task, finding: r.Inconsistency) -> int | None:
    """An action the PLC acknowledged whose end nobody saw (it restarted): sent again
    if harmless (by the records; the PLC refuses a SCAN of an empty slot, and that
    failure is asked about), else asked about at once; the action's id, or None."""
    if _repeat_if_safe(db, task, None):
        return None
    return ask(db, finding, {task.id: task})


def piece_not_at_source(db, task, error_code: str) -> bool:
    """An unload the PLC refused with SOURCE_EMPTY (nothing moved): the slot the
    database says holds the piece is empty, so a RETRY cannot succeed. The job is
    put back where the records had it, held, and the check's own question is
    asked (where is the piece?), once. False (nothing done) for any other failure."""
    if error_code != r.SOURCE_EMPTY or task.kind != ev.EQUIPMENT_TO_BUFFER:
        return False
    params = task.params or {}
    job_id = (params.get("jobIds") or [None])[0]
    before = (params.get("before") or {}).get(str(job_id))
    job = db.job(job_id) if job_id is not None else None
    if job is None or before is None or job.status in JOB_TERMINAL:
        return False
    if job.status in JOB_HELD:  # held meanwhile: back to its earlier status when released
        job = restore_job(db, job.id, before, status=job.status, held_status=before["status"])
    else:
        job = restore_job(db, job.id, before, status="SUSPENDED", held_status=before["status"])
    row = r.JobRow(job.id, job.status, job.position_type, job.position_ref_id, job.temp_slot_no)
    finding = r.machine_piece_missing(row, task.equipment_id, task.slot_no, case=r.SOURCE_EMPTY,
                                      task_id=task.id)
    _ask_what_is_new(db, [finding], {})
    return True


def _hold(db, job_id):
    job = db.job(job_id)
    if job is None or job.status in JOB_TERMINAL or job.status in JOB_HELD:
        return
    db.set_job_status(job.id, (job.status,), "SUSPENDED", held_status=job.status)


HANDLERS = {m.RecoveryCheck: recovery_check}
