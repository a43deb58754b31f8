"""Hardware actions as the loop sees them: applying a scheduled action
(claim + task), and what a task's success or failure does to the state.

Every task records in ``params`` the jobs it moves and where they were
before (``before``), so a failure can be put right by an operator's RETRY.
"""

from __future__ import annotations

from shared import events as ev

from .dbstate import KEEP, ConditionFailed, DBState
from .hardware_port import HardwareRequest
from .scheduler import Action, Load, Mark, Refill, Scan, StartMachine, Swap, Unload

ROBOT_FAILED = ev.ROBOT_ACTION_FAILED
OUT_TIMEOUT_SECONDS = 150.0
TOOL_FAILED = ev.TOOL_ACTION_FAILED
START_FAILED = ev.MACHINE_START_FAILED


def _before(job) -> dict:
    # stepIndex: which route step the task served (the job detail's step times)
    return {"status": job.status, "positionType": job.position_type,
            "positionRefId": job.position_ref_id, "tempSlotNo": job.temp_slot_no,
            "stepIndex": job.step_index}


class ActionExecutor:
    """Turns a chosen scheduler :class:`Action` into conditional transitions,
    tasks (``task.kind = action.task_kind``) and the hardware requests to send
    after the commit. The contract: ``docs/scheduler.md``."""

    def __init__(self, action_timeout_seconds: float = 120.0):
        self.timeout = action_timeout_seconds

    def _task(self, db: DBState, kind: str, jobs: list, *, equipment_id=None, slot_no=None,
              extra: dict | None = None, timeout: float | None = None):
        params = {"jobIds": [j.id for j in jobs], "before": {str(j.id): _before(j) for j in jobs},
                  **(extra or {})}
        task = db.create_task(kind, job_id=jobs[0].id if jobs else None,
                              work_order_id=jobs[0].work_order_id if jobs else None,
                              equipment_id=equipment_id, slot_no=slot_no, params=params,
                              timeout_seconds=timeout or self.timeout)
        return db.start_task(task.id)

    def _job(self, db: DBState, job_id: int):
        job = db.job(job_id)
        if job is None:
            raise ConditionFailed(f"job {job_id} does not exist")
        return job

    def apply(self, db: DBState, action: Action) -> list[HardwareRequest]:
        if isinstance(action, Refill):
            db.take_dock_pieces(len(action.assignments))
            taken = db.buffer_occupancy()
            requests = []
            # The robot runs them one after another: each deadline allows for those before it.
            for i, a in enumerate(action.assignments):
                job = self._job(db, a.job_id)
                if a.buffer_slot in taken:
                    raise ConditionFailed(f"buffer slot {a.buffer_slot} is occupied")
                task = self._task(db, ev.DOCK_TO_BUFFER, [job], extra={"bufferSlot": a.buffer_slot},
                                  timeout=self.timeout * (i + 1))
                db.claim_job_for_action(job.id, "PENDING", "MOVING", "ON_ROBOT", None,
                                        temp_slot_no=a.buffer_slot)
                taken[a.buffer_slot] = job.id
                requests.append(HardwareRequest("dock_to_buffer", task.id, ROBOT_FAILED,
                                                {"slot_no": a.buffer_slot, "job_id": job.id}))
            return requests
        if isinstance(action, Load):
            job = self._job(db, action.job_id)
            task = self._task(db, ev.BUFFER_TO_EQUIPMENT, [job], equipment_id=action.equipment_id,
                              slot_no=action.slot_no)
            db.claim_job_for_action(job.id, "QUEUED", "MOVING", "ON_ROBOT", None)
            return [HardwareRequest("buffer_to_equipment", task.id, ROBOT_FAILED, {
                "slot_no": job.temp_slot_no, "equipment_id": action.equipment_id,
                "equipment_slot": action.slot_no, "job_id": job.id})]
        if isinstance(action, Unload):
            job = self._job(db, action.job_id)
            task = self._task(db, ev.EQUIPMENT_TO_BUFFER, [job], equipment_id=action.equipment_id,
                              slot_no=action.slot_no)
            # The slot keeps the piece until the robot reports it back on the buffer.
            db.claim_job_for_action(job.id, "WAITING_UNLOAD", "MOVING")
            return [HardwareRequest("equipment_to_buffer", task.id, ROBOT_FAILED, {
                "equipment_id": action.equipment_id, "equipment_slot": action.slot_no,
                "slot_no": job.temp_slot_no, "job_id": job.id})]
        if isinstance(action, Swap):
            out, into = self._job(db, action.unload.job_id), self._job(db, action.load.job_id)
            task = self._task(db, ev.SWAP, [out, into], equipment_id=action.equipment_id,
                              slot_no=action.slot_no)
            db.claim_job_for_action(out.id, "WAITING_UNLOAD", "MOVING")
            db.claim_job_for_action(into.id, "QUEUED", "MOVING", "ON_ROBOT", None)
            return [HardwareRequest("swap", task.id, ROBOT_FAILED, {
                "equipment_id": action.equipment_id, "equipment_slot": action.slot_no,
                "unload_to_slot": out.temp_slot_no, "load_from_slot": into.temp_slot_no,
                "unload_job_id": out.id, "load_job_id": into.id})]
        if isinstance(action, Scan | Mark):
            job = self._job(db, action.job_id)
            kind = action.task_kind
            text = f"{job.work_order_id}-{job.seq_no}"
            task = self._task(db, kind, [job], extra={"text": text} if kind == ev.MARK else None)
            db.claim_job_for_action(job.id, "QUEUED", "PROCESSING")
            kwargs = {"slot_no": job.temp_slot_no, "job_id": job.id}
            if kind == ev.MARK:
                kwargs["text"] = text
            return [HardwareRequest(kind.lower(), task.id, TOOL_FAILED, kwargs)]
        if isinstance(action, StartMachine):
            jobs = [self._job(db, job_id) for _, job_id in action.jobs]
            slot_jobs = {str(slot_no): job_id for slot_no, job_id in action.jobs}
            task = self._task(db, ev.START_MACHINE, jobs, equipment_id=action.equipment_id,
                              extra={"jobs": slot_jobs})
            # Loaded → cycle requested: the jobs are PROCESSING from now on, so a
            # MachineDone that overtakes the start's own result still finds them.
            for job in jobs:
                db.claim_job_for_action(job.id, "QUEUED", "PROCESSING")
            return [HardwareRequest("start_machine", task.id, START_FAILED, {
                "equipment_id": action.equipment_id, "jobs": slot_jobs})]
        raise TypeError(f"not an action: {action!r}")


# -- what a finished step does ----------------------------------------------------------


def take_out(db: DBState, job, terminal: str) -> list[HardwareRequest]:
    """Finish a job whose piece sits on its buffer slot: COMPLETED / SCRAPPED
    (the slot is free in the DB at once, seed 暂存台) and a ``BUFFER_TO_DOCK``
    task that takes the piece out of the cell. That task is a robot task, so
    no other robot action (a refill into that slot) is chosen before it ends.
    Its params carry no ``jobIds``: the job is terminal, its result is not stale."""
    slot = job.temp_slot_no
    finished = db.finish_job(job.id, terminal)
    if slot is None or job.position_type != "ON_BUFFER":
        return []
    return take_out_again(db, finished, slot)


def take_out_again(db: DBState, job, buffer_slot: int | None, *, reissues: int = 0) -> list[HardwareRequest]:
    """The ``BUFFER_TO_DOCK`` task for a terminal job's piece on ``buffer_slot``
    (also once more, when a restart lost the first one's outcome and it did not happen)."""
    if buffer_slot is None:
        return []
    task = db.create_task(ev.BUFFER_TO_DOCK, job_id=job.id, work_order_id=job.work_order_id,
                          params={"bufferSlot": buffer_slot, "finished": job.status,
                                  **({"reissues": reissues} if reissues else {})},
                          timeout_seconds=OUT_TIMEOUT_SECONDS)
    db.start_task(task.id)
    return [HardwareRequest("buffer_to_dock", task.id, ROBOT_FAILED, {"slot_no": buffer_slot, "job_id": job.id})]


def advance_after_step(db: DBState, job) -> list[HardwareRequest]:
    """The job's current step is done: next step, or COMPLETED/SCRAPPED (the
    piece is then taken out: the requests to send), or an operator's decision
    for an inspection without a verdict."""
    route = db.route(job.work_order_id)
    step = route[job.step_index] if job.step_index < len(route) else {"op": "?"}
    if step["op"] == "inspect":
        disposition = (job.context or {}).get("disposition")
        if disposition == "SCRAP":
            return take_out(db, job, "SCRAPPED")
        if disposition == "REWORK":
            back = max(0, job.step_index - 1)
            db.complete_step(job.id, job.step_index, back, {"disposition": None})
            return []
        if disposition != "PASS":
            # No verdict yet: hold the piece until INSPECTION_DECISION is resolved.
            db.set_job_status(job.id, (job.status,), "SUSPENDED", held_status="QUEUED")
            return []
    nxt = job.step_index + 1
    if nxt >= len(route):
        return take_out(db, db.complete_step(job.id, job.step_index, nxt), "COMPLETED")
    db.complete_step(job.id, job.step_index, nxt, {"disposition": None} if step["op"] == "inspect" else None)
    return []


def apply_task_success(db: DBState, task, data: dict) -> list[HardwareRequest]:
    """``task`` has just been concluded SUCCEEDED; move its jobs on. Returns
    the hardware requests this causes (a finished piece taken out)."""
    params = task.params or {}
    job_ids = params.get("jobIds", [])
    kind = task.kind
    if kind == ev.DOCK_TO_BUFFER:
        db.move_job_to_buffer(job_ids[0], params["bufferSlot"], "QUEUED")
    elif kind == ev.BUFFER_TO_EQUIPMENT:
        db.move_job_to_equipment(job_ids[0], "ON_ROBOT", task.equipment_id, task.slot_no, "QUEUED")
    elif kind == ev.EQUIPMENT_TO_BUFFER:
        return advance_after_step(db, db.move_job_to_buffer(job_ids[0]))
    elif kind == ev.SWAP:
        moved = db.move_job_to_buffer(job_ids[0])
        db.move_job_to_equipment(job_ids[1], "ON_ROBOT", task.equipment_id, task.slot_no, "QUEUED")
        return advance_after_step(db, moved)
    elif kind in (ev.SCAN, ev.MARK):
        patch = ({"barcode": (data or {}).get("code")} if kind == ev.SCAN
                 else {"markedText": params.get("text")})
        job = db.patch_job_context(job_ids[0], patch)
        return advance_after_step(db, job)
    elif kind == ev.START_MACHINE:
        # Running unless its MachineDone overtook this result (no piece of it still processing).
        equipment = db.equipment(task.equipment_id)
        still = [j for j in (db.job(i) for i in job_ids)
                 if j.status == "PROCESSING" or j.held_status == "PROCESSING"]
        if still and equipment.status == "IDLE":
            db.set_equipment_status(task.equipment_id, "RUNNING")
    return []


# A take-out answered NOT_EXECUTED is sent again; after this many, an operator takes it.
MAX_TAKE_OUT_REISSUES = 3


def put_back_not_executed(db: DBState, task) -> list[HardwareRequest]:
    """The hardware answered NOT_EXECUTED (a clean stop came before the action
    reached the PLC): nothing moved, so every job goes back to where and what it
    was (a job held meanwhile stays held), with no alarm and no question. A
    take-out is issued again: its piece still sits on the buffer slot."""
    params = task.params or {}
    if task.kind == ev.DOCK_TO_BUFFER:
        db.give_back_dock_pieces(1)  # the piece is still at the dock
    _put_jobs_back(db, params)
    db.emit("ActionNotExecuted", {"taskId": task.id, "kind": task.kind, "jobIds": params.get("jobIds", [])})
    if task.kind == ev.BUFFER_TO_DOCK and task.job_id is not None:
        return take_out_again(db, db.job(task.job_id), params.get("bufferSlot"),
                              reissues=int(params.get("reissues", 0)) + 1)
    return []


def _put_jobs_back(db: DBState, params: dict) -> None:
    """Nothing moved: each job of the task where and what it was before (a job
    held meanwhile stays held, and returns to its earlier status when released)."""
    for job_id in params.get("jobIds", []):
        before, job = params["before"][str(job_id)], db.job(job_id)
        if job.status in ("PAUSED", "SUSPENDED"):
            restore_job(db, job_id, before, status=job.status, held_status=before["status"])
        else:
            restore_job(db, job_id, before, status=before["status"], held_status=None)


def _reissued_too_often(task) -> bool:
    return task.kind == ev.BUFFER_TO_DOCK and int((task.params or {}).get("reissues", 0)) >= MAX_TAKE_OUT_REISSUES


def apply_task_failure(db: DBState, task, error_code: str, *,
                       finished_at: str | None = None) -> list[HardwareRequest]:
    """``task`` has just been concluded FAILED: its jobs SUSPENDED (nothing moved:
    the request was refused) or ERROR (where the piece is is uncertain), with an
    alarm and a manual action. A refill from an empty dock is no fault: its
    piece simply waits at the dock again; an action the hardware never executed
    is put back (:func:`put_back_not_executed`). Returns the requests to send."""
    error_message = task.error_message
    params = task.params or {}
    if error_code == ev.NOT_EXECUTED and not _reissued_too_often(task):
        return put_back_not_executed(db, task)
    if task.kind == ev.DOCK_TO_BUFFER and error_code == "SOURCE_EMPTY":
        # The dock ran out (the PLC says so, and nothing moved): not a fault. The
        # piece goes back to waiting at the dock for the next pallet.
        db.observe_dock(0, finished_at)
        _put_jobs_back(db, params)
        db.emit("DockEmpty", {"taskId": task.id, "jobIds": params.get("jobIds", [])})
        return []
    alarm = db.raise_alarm("ACTION_FAILED", f"{task.kind} failed: {error_code} {error_message or ''}".strip(),
                           equipment_id=task.equipment_id,
                           job_id=(params.get("jobIds") or [None])[0], task_id=task.id)
    if task.kind == ev.BUFFER_TO_DOCK:
        db.create_manual_action(
            "REMOVE_FINISHED_PIECE",
            f"Take the finished piece of job {task.job_id} off buffer slot {params.get('bufferSlot')} "
            f"({error_code}): the slot is free for the next piece.",
            ["DONE"], job_id=task.job_id, alarm_id=alarm.id, context={"taskId": task.id})
        return []
    if task.kind == ev.START_MACHINE:
        db.set_equipment_status(task.equipment_id, "FAULT")
        for job_id in (params.get("jobs") or {}).values():
            job = db.job(job_id)
            if job is not None and job.status not in ("PAUSED", "SUSPENDED"):
                # loaded but not started: RETRY brings them back to QUEUED and they start again
                db.set_job_status(job_id, (job.status,), "SUSPENDED", held_status="QUEUED")
        db.create_manual_action(
            "EQUIPMENT_FAULT", f"{task.equipment_id} did not start: {error_code}",
            ["RETRY", "SCRAP"], equipment_id=task.equipment_id, alarm_id=alarm.id,
            context={"taskId": task.id, "jobIds": list((params.get("jobs") or {}).values())})
        return []
    if task.kind == ev.DOCK_TO_BUFFER and error_code == "REJECTED":
        db.give_back_dock_pieces(1)  # refused before it moved: the piece is still at the dock
    for job_id in params.get("jobIds", []):
        if error_code == "REJECTED":
            before = params["before"][str(job_id)]
            restore_job(db, job_id, before, status="SUSPENDED", held_status=before["status"])
        else:
            job = db.job(job_id)
            # A step past its deadline is suspended for the operator; a reported failure is an ERROR.
            status = "SUSPENDED" if error_code == "ACTION_TIMEOUT" else "ERROR"
            db.set_job_status(job_id, (job.status,), status, held_status=None, error_code=error_code)
        db.create_manual_action(
            "ACTION_FAILED",
            f"{task.kind} of job {job_id} failed ({error_code}). RETRY once the piece is back "
            f"where it was before the action; SCRAP to take it out.",
            ["RETRY", "SCRAP"], job_id=job_id, equipment_id=task.equipment_id, alarm_id=alarm.id,
            context={"taskId": task.id, "before": params["before"][str(job_id)]})
    return []


def restore_job(db: DBState, job_id: int, before: dict, *, status: str, held_status=KEEP):
    """Put a job back where it was before a failed action (an operator confirmed it is there)."""
    job = db.job(job_id)
    return db.place_job(job_id, (job.status,), status, before["positionType"],
                        before["positionRefId"], before["tempSlotNo"], held_status=held_status)


def hold_job(db: DBState, job_id: int, status: str):
    """PAUSED/SUSPENDED, remembering the status to return to."""
    job = db.job(job_id)
    if job.status in ("PAUSED", "SUSPENDED"):
        return job
    return db.set_job_status(job_id, (job.status,), status, held_status=job.status)


def mark_slot_done(db: DBState, slot) -> None:
    """A machine finished the piece in ``slot``: slot DONE, job WAITING_UNLOAD
    (or, for a held job, WAITING_UNLOAD is what it returns to). A cancelled
    piece's slot stays as it is until an operator has taken it out."""
    job = db.job(slot.current_job_id)
    if job is not None and job.status == "CANCELLED":
        return
    db.slot_done(slot.equipment_id, slot.slot_no, slot.current_job_id)


def scrap_job(db: DBState, job) -> None:
    """Out of the cell as scrap; an equipment slot still holding it is emptied."""
    if job.position_type == "ON_EQUIPMENT":
        equipment_id, _, n = job.position_ref_id.rpartition(":")
        slot = db.slot(equipment_id, int(n))
        if slot is not None and slot.current_job_id == job.id:
            db.set_equipment_slot(equipment_id, int(n), ("OCCUPIED", "DONE"), "EMPTY", None)
    db.finish_job(job.id, "SCRAPPED")
