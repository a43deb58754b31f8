"""Seeded history for the page's views: ten hours of the line (state
intervals, cycles, finished jobs), alarms, a piece in flight, work orders,
open manual actions with their facts."""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from sqlalchemy import insert, text, update

from shared.config import Settings
from shared.db.models import (
    Alarm,
    Equipment,
    Job,
    MachineCycle,
    MachineStateInterval,
    ManualAction,
    Task,
    WorkOrder,
)
from shared.layout import load_layout

# Each machine's states, repeated from ten hours ago until now (minutes). The
# history starts before the 8 h window, so the line is observed over all of it,
# and 30 s off the minute, so no state change sits on the window's edges.
PATTERNS = {
    "MC1": [("PROCESSING", 14), ("WAITING_UNLOAD", 2), ("IDLE", 4), ("PROCESSING", 14), ("FAULT", 9), ("IDLE", 3)],
    "MC2": [("PROCESSING", 16), ("WAITING_UNLOAD", 3), ("IDLE", 3), ("PROCESSING", 16), ("IDLE", 5)],
    "WASH1": [("IDLE", 6), ("PROCESSING", 25), ("WAITING_UNLOAD", 2), ("IDLE", 10), ("PROCESSING", 25),
              ("FAULT", 12), ("IDLE", 4)],
    "INSP1": [("PROCESSING", 5), ("WAITING_UNLOAD", 1), ("IDLE", 12), ("PROCESSING", 6), ("IDLE", 9)],
}
FINISHED_JOBS = 120  # one every 5 minutes over the ten hours, every 8th scrapped


def seed_history(writable, now: datetime) -> None:
    """Ten hours of the line as the loop records it: state intervals (the last
    one open), the cycles inside PROCESSING, finished jobs."""
    layout = load_layout(Settings().line_file)
    product = layout.product("BRACKET-A")
    rng = random.Random(18)
    t0 = now - timedelta(hours=10, seconds=30)
    with writable.begin() as s:
        order = WorkOrder(code="WO-HISTORY", product_id=product.id, route=[st.to_json() for st in product.route],
                          quantity=FINISHED_JOBS, status="RUNNING", started_at=t0)
        s.add(order)
        s.flush()
        jobs = [Job(work_order_id=order.id, seq_no=n + 1, status="SCRAPPED" if n % 8 == 7 else "COMPLETED",
                    position_type="OUT", step_index=len(product.route),
                    finished_at=t0 + timedelta(minutes=5 * (n + 1))) for n in range(FINISHED_JOBS)]
        s.add_all(jobs)
        s.flush()
        job_ids = [j.id for j in jobs]
        intervals, cycles = [], []
        for spec in layout.equipment:
            at, k = t0, 0
            while at < now:
                state, minutes = PATTERNS[spec.id][k % len(PATTERNS[spec.id])]
                end = at + timedelta(minutes=minutes)
                intervals.append({"equipment_id": spec.id, "state": state, "started_at": at,
                                  "ended_at": end if end < now else None})
                if state == "PROCESSING":  # back-to-back cycles a little slower than ideal
                    start = at
                    while True:
                        stop = start + timedelta(seconds=spec.cycle_seconds * rng.uniform(0.95, 1.3))
                        if stop > min(end, now):
                            break
                        pieces = [(len(cycles) + i) % FINISHED_JOBS for i in range(4 if spec.batch else 1)]
                        cycle = {"equipment_id": spec.id, "requested_at": start - timedelta(seconds=1),
                                 "started_at": start, "ended_at": stop, "aborted": False,
                                 "job_ids": [job_ids[n] for n in pieces]}
                        # the loop counts each finished piece's outcome into its cycles
                        scrapped = sum(1 for n in pieces if jobs[n].status == "SCRAPPED")
                        cycles.append({**cycle, "good_pieces": len(pieces) - scrapped,
                                       "scrapped_pieces": scrapped})
                        start = stop
                at, k = end, k + 1
        s.execute(insert(MachineStateInterval), intervals)
        s.execute(insert(MachineCycle), cycles)


def seed_alarms(writable, now: datetime) -> dict[str, int]:
    """Two active alarms (CRITICAL raised, WARNING acknowledged) and a history in
    which MACHINE_FAULT keeps coming back."""
    ago = lambda minutes: now - timedelta(minutes=minutes)  # noqa: E731
    with writable.begin() as s:
        active = Alarm(code="SPINDLE_OVERLOAD", severity="CRITICAL", message="MC2 spindle overload",
                       equipment_id="MC2", raised_at=ago(20))
        acked = Alarm(code="LOW_COOLANT", severity="WARNING", message="WASH1 coolant low",
                      equipment_id="WASH1", status="ACKNOWLEDGED", raised_at=ago(50), acknowledged_at=ago(45),
                      acknowledged_by="operator")
        s.add_all([active, acked])
        for minutes in (400, 250, 90):
            s.add(Alarm(code="MACHINE_FAULT", severity="ERROR", message="MC1 tool breakage", equipment_id="MC1",
                        status="CLEARED", raised_at=ago(minutes), cleared_at=ago(minutes - 9)))
        s.add(Alarm(code="DOOR_OPEN", severity="INFO", message="INSP1 door opened", equipment_id="INSP1",
                    status="CLEARED", raised_at=ago(130), cleared_at=ago(129)))
        s.flush()
        return {"critical": active.id, "warning": acked.id}


def seed_live_job(writable, now: datetime) -> int:
    """A piece on the robot, its first two steps done (their tasks say when)."""
    layout = load_layout(Settings().line_file)
    product = layout.product("BRACKET-A")
    with writable.begin() as s:
        order = WorkOrder(code="WO-LIVE", product_id=product.id, route=[st.to_json() for st in product.route],
                          quantity=1, status="RUNNING", started_at=now - timedelta(minutes=30))
        s.add(order)
        s.flush()
        job = Job(work_order_id=order.id, seq_no=1, status="MOVING", position_type="ON_ROBOT", step_index=2)
        s.add(job)
        s.flush()

        def task(kind, step, start, end, equipment=None, status="SUCCEEDED"):
            s.add(Task(kind=kind, status=status, job_id=job.id, work_order_id=order.id, equipment_id=equipment,
                       started_at=now - timedelta(minutes=start),
                       finished_at=None if end is None else now - timedelta(minutes=end),
                       params={"jobIds": [job.id], "before": {str(job.id): {"stepIndex": step}}}))
        task("DOCK_TO_BUFFER", 0, 29, 28)
        task("SCAN", 0, 27, 26)
        task("BUFFER_TO_EQUIPMENT", 1, 25, 24, "MC1")
        task("START_MACHINE", 1, 24, 23, "MC1")
        task("EQUIPMENT_TO_BUFFER", 1, 10, 9, "MC1")
        task("BUFFER_TO_EQUIPMENT", 2, 1, None, "WASH1", status="RUNNING")
        return job.id


def seed_orders(writable, now: datetime) -> dict[str, int]:
    """A short order that ran (and finished) three hours ago, one never started."""
    layout = load_layout(Settings().line_file)
    product = layout.product("BRACKET-A")
    route = [st.to_json() for st in product.route]
    started = now.replace(microsecond=0) - timedelta(hours=3, seconds=17)
    with writable.begin() as s:
        short = WorkOrder(code="WO-SHORT", product_id=product.id, route=route, quantity=2, completed_qty=2,
                          status="COMPLETED", started_at=started, finished_at=started + timedelta(minutes=7))
        never = WorkOrder(code="WO-NEVER", product_id=product.id, route=route, quantity=1)
        s.add_all([short, never])
        s.flush()
        return {"short": short.id, "never": never.id}



def seed_open_actions(writable) -> dict[str, int]:
    """What the floor has open, as the loop writes it (English text, kind, facts):
    MC1 failed to start (its fault still on), a recovery question, a kind no
    catalog knows; each with its alarm, and MC2's own fault alarm on top."""
    with writable.begin() as s:
        s.execute(update(Equipment).where(Equipment.id == "MC1").values(status="FAULT"))
        start_alarm = Alarm(code="ACTION_FAILED", severity="ERROR", message="START_MACHINE failed: PLC_ERROR",
                            equipment_id="MC1", status="ACKNOWLEDGED",
                            facts={"taskKind": "START_MACHINE", "errorCode": "PLC_ERROR", "equipmentId": "MC1",
                                   "errorMessage": None, "jobId": None})
        recovery_alarm = Alarm(code="RECOVERY_TASK_OUTCOME_UNKNOWN", severity="ERROR", status="ACKNOWLEDGED",
                               message="Task 7 (DOCK_TO_BUFFER) was running when the line controller restarted",
                               facts={"taskId": 7, "taskKind": "DOCK_TO_BUFFER", "jobId": 3, "equipmentId": None})
        fault_alarm = Alarm(code="EQUIPMENT_FAULT", severity="ERROR", message="MC2 reports fault 3",
                            equipment_id="MC2", facts={"equipmentId": "MC2", "fault": 3})
        s.add_all([start_alarm, recovery_alarm, fault_alarm])
        s.flush()
        start = ManualAction(kind="EQUIPMENT_FAULT", text="MC1 did not start: PLC_ERROR", choices=["RETRY", "SCRAP"],
                             equipment_id="MC1", alarm_id=start_alarm.id,
                             facts={"equipmentId": "MC1", "errorCode": "PLC_ERROR"})
        recovery = ManualAction(
            kind="RECOVERY_TASK_OUTCOME_UNKNOWN", choices=["CONFIRM", "ACTION_DONE", "PIECE_REMOVED", "SCRAP"],
            text="Task 7 (DOCK_TO_BUFFER) was running when the line controller restarted. CONFIRM: ...",
            alarm_id=recovery_alarm.id,
            facts={"taskId": 7, "taskKind": "DOCK_TO_BUFFER", "jobId": 3, "equipmentId": None, "jobIds": [3]})
        unknown = ManualAction(kind="FUTURE_KIND", text="Something only the English text explains.",
                               choices=["OK"], facts={"what": 1})
        stopped = ManualAction(
            kind="MACHINE_FAULT_DURING_CYCLE", choices=["RESTART_CYCLE", "RETURN_TO_BUFFER", "SCRAP"],
            text="WASH1 faulted during the cycle of job 5 (slot 2). RESTART_CYCLE runs the cycle again …",
            equipment_id="WASH1", facts={"equipmentId": "WASH1", "pieces": "job 5 (slot 2)", "reason": "fault 3",
                                         "stopped": [{"jobId": 5, "slotNo": 2}]})
        s.add_all([start, recovery, unknown, stopped])
        s.flush()
        return {"start": start.id, "recovery": recovery.id, "unknown": unknown.id, "stopped": stopped.id,
                "fault_alarm": fault_alarm.id, "start_alarm": start_alarm.id}


def seed_line_states(writable, now: datetime) -> tuple[int, int]:
    """The line's states in today's shift (the calendar's default: the UTC day) as
    the loop records them over its last 40 minutes (less just after midnight):
    running, a machine fault without a reason, an e-stop given OPERATOR, running
    on. The fault's and the e-stop's ids."""
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    span = min(timedelta(minutes=40), now - midnight - timedelta(seconds=5))
    base = now - span

    def at(fraction: float) -> datetime:
        return base + span * fraction

    rows = [("RUNNING", None, None, at(0), at(0.2), None), ("DOWN", "EQUIPMENT_FAULT", "MC1", at(0.2), at(0.5), None),
            ("RUNNING", None, None, at(0.5), at(0.6), None), ("DOWN", "ESTOP", None, at(0.6), at(0.8), "OPERATOR"),
            ("RUNNING", None, None, at(0.8), None, None)]
    ids = []
    with writable.begin() as s:
        for state, cause, equipment, start, end, reason in rows:
            ids.append(s.execute(text(
                "INSERT INTO line_state_interval (state, cause, equipment_id, started_at, ended_at, seen_at, "
                "reason_code, assigned_by, assigned_at) VALUES (:st, :c, :e, :a, :b, :a, :r, "
                "CASE WHEN :r IS NULL THEN NULL ELSE 'anna' END, CASE WHEN :r IS NULL THEN NULL ELSE :a END) "
                "RETURNING id"), {"st": state, "c": cause, "e": equipment, "a": start, "b": end, "r": reason}).scalar())
    return ids[1], ids[3]
