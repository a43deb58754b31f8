"""Applying a scheduled action: the conditional claims of its jobs, its task,
and the hardware requests to send after the commit.

Every task records in ``params`` the jobs it moves and where they were
before (``before``), so a failure can be put right by an operator's RETRY
(``task_outcomes``).
"""

from __future__ import annotations

from shared import events as ev

from .dbstate import ConditionFailed, DBState
from .hardware_port import HardwareRequest
from .scheduler import Action, Load, Mark, Refill, Scan, StartMachine, Swap, Unload

ROBOT_FAILED = ev.ROBOT_ACTION_FAILED
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
        # Which method applies which action (Scan and Mark are both tool actions).
        self._appliers = ((Refill, self._refill), (Load, self._load), (Unload, self._unload),
                          (Swap, self._swap), (Scan | Mark, self._tool), (StartMachine, self._start))

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
        for kind, applier in self._appliers:
            if isinstance(action, kind):
                return applier(db, action)
        raise TypeError(f"not an action: {action!r}")

    def _refill(self, db: DBState, action: Refill) -> list[HardwareRequest]:
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

    def _load(self, db: DBState, action: Load) -> list[HardwareRequest]:
        job = self._job(db, action.job_id)
        task = self._task(db, ev.BUFFER_TO_EQUIPMENT, [job], equipment_id=action.equipment_id,
                          slot_no=action.slot_no)
        db.claim_job_for_action(job.id, "QUEUED", "MOVING", "ON_ROBOT", None)
        return [HardwareRequest("buffer_to_equipment", task.id, ROBOT_FAILED, {
            "slot_no": job.temp_slot_no, "equipment_id": action.equipment_id,
            "equipment_slot": action.slot_no, "job_id": job.id})]

    def _unload(self, db: DBState, action: Unload) -> list[HardwareRequest]:
        job = self._job(db, action.job_id)
        task = self._task(db, ev.EQUIPMENT_TO_BUFFER, [job], equipment_id=action.equipment_id,
                          slot_no=action.slot_no)
        # The slot keeps the piece until the robot reports it back on the buffer.
        db.claim_job_for_action(job.id, "WAITING_UNLOAD", "MOVING")
        return [HardwareRequest("equipment_to_buffer", task.id, ROBOT_FAILED, {
            "equipment_id": action.equipment_id, "equipment_slot": action.slot_no,
            "slot_no": job.temp_slot_no, "job_id": job.id})]

    def _swap(self, db: DBState, action: Swap) -> list[HardwareRequest]:
        out, into = self._job(db, action.unload.job_id), self._job(db, action.load.job_id)
        task = self._task(db, ev.SWAP, [out, into], equipment_id=action.equipment_id,
                          slot_no=action.slot_no)
        db.claim_job_for_action(out.id, "WAITING_UNLOAD", "MOVING")
        db.claim_job_for_action(into.id, "QUEUED", "MOVING", "ON_ROBOT", None)
        return [HardwareRequest("swap", task.id, ROBOT_FAILED, {
            "equipment_id": action.equipment_id, "equipment_slot": action.slot_no,
            "unload_to_slot": out.temp_slot_no, "load_from_slot": into.temp_slot_no,
            "unload_job_id": out.id, "load_job_id": into.id})]

    def _tool(self, db: DBState, action: Scan | Mark) -> list[HardwareRequest]:
        job = self._job(db, action.job_id)
        kind = action.task_kind
        # A MARK marks the piece's serial (a job made before serials: its old text).
        text = job.serial or f"{job.work_order_id}-{job.seq_no}"
        task = self._task(db, kind, [job], extra={"text": text} if kind == ev.MARK else None)
        db.claim_job_for_action(job.id, "QUEUED", "PROCESSING")
        kwargs = {"slot_no": job.temp_slot_no, "job_id": job.id}
        if kind == ev.MARK:
            kwargs["text"] = text
        return [HardwareRequest(kind.lower(), task.id, TOOL_FAILED, kwargs)]

    def _start(self, db: DBState, action: StartMachine) -> list[HardwareRequest]:
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
