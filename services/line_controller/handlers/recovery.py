"""Restart recovery (seed 004, 恢复策略): the start-up check and what an
operator's answer to a recovery action does.

A task the hardware service still holds or has answered (``knownActions`` in
the start-up PLC reading) is no question: it stays RUNNING and its result,
which comes or is already queued, concludes it as usual. Only tasks the
hardware does not know (it restarted too, or was unreachable) are asked about.

``RecoveryCheck`` is the loop's first message after a start. It compares the
DB with itself and with the PLC (``consistency_checks.find_inconsistencies``) and turns
every disagreement into held jobs (SUSPENDED, ``held_status`` kept), an alarm
and a manual action whose choices are ``consistency_checks.CHOICES[kind]``. A RUNNING
task is closed (FAILED, ``RECOVERY_OUTCOME_UNKNOWN``): no result will be
accepted for it any more, so the robot is free, and the operator says what
happened. A job leaves SUSPENDED when the last open recovery action naming it
is resolved. Nothing is guessed and nothing is replayed from logs.
"""

from __future__ import annotations

from datetime import datetime

from shared import events as ev
from shared.db.models import JOB_HELD, JOB_TERMINAL

from .. import consistency_checks as r
from .. import messages as m
from ..dbstate import Rejected
from ..job_lifecycle import mark_slot_done, scrap_job, take_out_again
from ..task_outcomes import apply_task_success

OUTCOME_UNKNOWN = "RECOVERY_OUTCOME_UNKNOWN"

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
}


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
                                  ctx.layout.buffer_slots, equipment_running=running)


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


def check_against_plc(db, layout, plc_state: dict) -> dict:
    """The PLC answers again after a lost connection (it may have restarted, and a
    restarted PLC forgot its cycles): the start-up checks of the records against
    what it holds now. Tasks are left out: an action in flight is reported by the
    hardware service itself (not sent, or of unknown outcome).

    The picture was read before this message reached the loop, and the loop may
    have sent work since (a new hardware instance's first read races the starts
    the loop sends it): what that work touched is left out, the picture cannot
    show it yet. While the PLC was away the loop sent nothing, so a real
    reconnect's picture is whole."""
    jobs, slots, running = _db_rows(db)
    found = r.find_inconsistencies(jobs, slots, [], plc_state, layout.buffer_slots,
                                   equipment_running=running)
    observed = _observed_at(plc_state)
    if observed is not None:
        moved_on = db.places_sent_work_since(observed)
        found = [inc for inc in found if inc.equipment_id not in moved_on]
    created = _ask_what_is_new(db, found, {})
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
    found = _find(evt, ctx, open_tasks)
    created = _ask_what_is_new(db, found, open_tasks)
    dock = (evt.plc_state or {}).get("dock")
    if dock is not None and not evt.hardware_started_at and evt.plc_state.get("connected"):
        # The PLC's count is the truth now that no refill runs any more.
        db.observe_dock(dock["pieces"], evt.plc_state.get("observedAt"))
    db.emit("RecoveryChecked", {"inconsistencies": len(found), "manualActionIds": created,
                                "plcConnected": bool((evt.plc_state or {}).get("connected"))})
    return {"inconsistencies": len(found), "manualActionIds": created}


def _hold(db, job_id):
    job = db.job(job_id)
    if job is None or job.status in JOB_TERMINAL or job.status in JOB_HELD:
        return
    db.set_job_status(job.id, (job.status,), "SUSPENDED", held_status=job.status)


def _still_held(db, job_id, resolving_id) -> bool:
    return any(job_id in (a.context or {}).get("jobIds", []) for a in db.open_manual_actions()
               if r.is_recovery(a.kind) and a.id != resolving_id)


def _release(db, action, job_id, *, status=None, place: dict | None = None):
    """Back to work (``status``, default the held one; ``place``: where the piece
    is), unless another open recovery action still holds the job."""
    job = db.job(job_id)
    if job is None or job.status in JOB_TERMINAL:
        return None
    target = status or job.held_status or "QUEUED"
    held = job.status in JOB_HELD
    if _still_held(db, job_id, action.id) or job.status == "PAUSED":
        # Stay held; return to ``target`` when released.
        if place is not None:
            return db.place_job(job.id, (job.status,), job.status, place["positionType"],
                                place["positionRefId"], place["tempSlotNo"], held_status=target)
        return db.set_job_status(job.id, (job.status,), job.status, held_status=target) if held else job
    if place is not None:
        return db.place_job(job.id, (job.status,), target, place["positionType"],
                            place["positionRefId"], place["tempSlotNo"], held_status=None)
    if not held:
        return job
    return db.set_job_status(job.id, (job.status,), target, held_status=None)


def resolve_recovery(db, action, resolution: str) -> list:
    """Apply an operator's answer (``CONFIRM`` = accept the recorded state) to a
    RECOVERY_* action that has just been marked resolved; the hardware requests
    that follow from it (to send after the commit)."""
    context = action.context or {}
    job_ids = list(context.get("jobIds") or ([action.job_id] if action.job_id else []))
    if resolution in ("PIECE_REMOVED", "SCRAP"):
        for job_id in job_ids:
            _scrap(db, job_id, action, resolution)
        if action.kind == r.SLOT_MISMATCH and "slotNo" in context:
            _empty_slot(db, action.equipment_id, context["slotNo"])
        if action.kind == r.MACHINE_IDLE_BUT_DB_RUNNING:
            _equipment_idle(db, action.equipment_id)
        return []
    if action.kind == r.TASK_OUTCOME_UNKNOWN:
        return _resolve_task(db, action, db.task(context["taskId"]), job_ids, resolution)
    if action.kind == r.MACHINE_IDLE_BUT_DB_RUNNING:
        for job_id in job_ids:
            # CONFIRM: the cycle did not finish; loaded, not started (QUEUED on the
            # slot), the piece's cycle is started again. CYCLE_DONE: done, below.
            _release(db, action, job_id, status="QUEUED" if resolution == "CONFIRM" else None)
        if resolution == "CYCLE_DONE":
            for slot in db.slots(action.equipment_id):
                if slot.status == "OCCUPIED" and slot.current_job_id in job_ids:
                    mark_slot_done(db, slot)
        _equipment_idle(db, action.equipment_id)
    elif action.kind == r.MACHINE_RUNNING_BUT_DB_IDLE:
        equipment = db.equipment(action.equipment_id)
        if equipment is not None and equipment.status == "FAULT":
            db.set_equipment_status(equipment.id, "IDLE")
    elif action.kind == r.SLOT_MISMATCH:
        _resolve_slot(db, action, job_ids, resolution)
    else:
        for job_id in job_ids:
            _release(db, action, job_id)
    return []


def _resolve_task(db, action, task, job_ids, resolution):
    params = task.params or {}
    if task.kind == ev.BUFFER_TO_DOCK:
        # A finished piece on its way out (its job is terminal already): if it did
        # not leave, it is taken out again; nothing else depends on it.
        job = db.job(task.job_id)
        if resolution == "CONFIRM" and job is not None:
            return take_out_again(db, job, params.get("bufferSlot"))
        return []
    if resolution == "ACTION_DONE":
        for job_id in job_ids:
            _release(db, action, job_id)
        if any(db.job(j).status in JOB_HELD for j in params.get("jobIds", [])):
            raise Rejected("INVALID_TRANSITION", "another recovery action still holds this task's "
                           "jobs: resolve it first")
        return list(apply_task_success(db, task, {}) or [])
    before = params.get("before") or {}
    for job_id in job_ids:
        was = before.get(str(job_id))
        if was is None:  # a machine start: its pieces stay where they are
            _release(db, action, job_id)
        else:
            _release(db, action, job_id, status=was["status"], place=was)
    return []


def _resolve_slot(db, action, job_ids, resolution):
    context = action.context or {}
    if "positionRefId" in context:  # a job recorded on a slot that disagrees
        equipment_id, _, n = context["positionRefId"].partition(":")
        slot = db.slot(equipment_id, int(n)) if n.isdigit() else None
        if slot is None:
            raise Rejected("INVALID_TRANSITION", f"slot {context['positionRefId']} does not exist: "
                           "PIECE_REMOVED or SCRAP")
        holder = db.job(slot.current_job_id) if slot.current_job_id else None
        if holder is not None and holder.id not in job_ids and holder.status not in JOB_TERMINAL \
                and holder.position_ref_id == context["positionRefId"]:
            raise Rejected("INVALID_TRANSITION", f"slot {context['positionRefId']} holds job {holder.id}")
        if slot.current_job_id != job_ids[0]:
            db.set_equipment_slot(equipment_id, slot.slot_no, ("EMPTY", "OCCUPIED", "DONE"), "OCCUPIED",
                                  job_ids[0])
        for job_id in job_ids:
            _release(db, action, job_id)
        return
    # A slot holding a job recorded elsewhere.
    slot_no = context["slotNo"]
    if resolution == "PIECE_ON_MACHINE" and job_ids:
        job = db.job(job_ids[0])
        _release(db, action, job.id, status="PROCESSING", place={
            "positionType": "ON_EQUIPMENT", "positionRefId": f"{action.equipment_id}:{slot_no}",
            "tempSlotNo": job.temp_slot_no})
        slot = db.slot(action.equipment_id, slot_no)
        if slot.status == "DONE":
            db.set_equipment_slot(action.equipment_id, slot_no, ("DONE",), "OCCUPIED", job.id)
        return
    _empty_slot(db, action.equipment_id, slot_no)
    for job_id in job_ids:
        _release(db, action, job_id)


def _scrap(db, job_id, action, resolution):
    job = db.job(job_id)
    if job is None or job.status in JOB_TERMINAL:
        return
    db.patch_job_context(job.id, {"disposition": "SCRAP", "recovery": {
        "manualActionId": action.id, "kind": action.kind, "resolution": resolution}})
    scrap_job(db, db.job(job.id))


def _empty_slot(db, equipment_id, slot_no):
    slot = db.slot(equipment_id, slot_no)
    if slot is not None and slot.status != "EMPTY":
        db.set_equipment_slot(equipment_id, slot_no, ("OCCUPIED", "DONE"), "EMPTY", None)


def _equipment_idle(db, equipment_id):
    """The machine is not running whatever the DB said: IDLE, so a cycle with pieces
    still to process is started again."""
    equipment = db.equipment(equipment_id) if equipment_id else None
    if equipment is not None and equipment.status == "RUNNING":
        db.set_equipment_status(equipment_id, "IDLE")


HANDLERS = {m.RecoveryCheck: recovery_check}
