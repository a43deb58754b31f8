"""A stand-in ``line_controller`` for the gateway's tests.

It implements the RPC contract of docs/architecture.md ("line_controller
RPCs") over the real transport — ``command`` and ``status`` — and dispatches
``line_events`` after each committed transaction, as the real loop does. Its
state machine is deliberately small (just enough for every gateway path); the
integrator runs the same tests against the real service.

``EventWriter`` appends ``event_log`` rows and publishes the matching
``line_events`` the way the loop does, for the websocket tests.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from nameko.events import EventDispatcher
from nameko.rpc import rpc
from nameko.standalone.events import event_dispatcher
from sqlalchemy import func, select, text

from services.line_controller.dbstate import DBState
from services.line_controller.dbstate import Rejected as LoopRejected
from services.line_controller.dbstate.line_tracking import stop_json
from services.line_controller.messages import split_actor
from shared import serialize
from shared.config import Settings
from shared.db.dependency import Database
from shared.db.engine import make_engine, make_sessionmaker
from shared.db.lines import register_lines
from shared.db.models import (
    JOB_TERMINAL,
    Alarm,
    Equipment,
    EquipmentSlot,
    EventLog,
    Job,
    LoopMessage,
    ManualAction,
    WorkOrder,
)
from shared.events import HARDWARE, LINE_CONTROLLER, LINE_EVENTS, LineServices
from shared.layout import load_layout


class Rejected(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


def append_events(session, events: list[tuple[str, dict]]) -> list[dict]:
    """Write events with the next gapless seqs (one tx id); the frames written."""
    session.execute(text("LOCK TABLE event_log IN EXCLUSIVE MODE"))
    last = session.scalar(select(func.coalesce(func.max(EventLog.seq), 0)))
    rows = [EventLog(seq=last + i + 1, tx_id=last + 1, type=t, payload=p, at=datetime.now(UTC))
            for i, (t, p) in enumerate(events)]
    session.add_all(rows)
    session.flush()
    return [serialize.event_frame(r) for r in rows]


def _load(session, model, key, what):
    row = session.get(model, key, with_for_update=True)
    if row is None:
        raise Rejected("NOT_FOUND", f"{what} {key} not found")
    return row


def _transition(obj, allowed_from, to, what):
    if obj.status not in allowed_from:
        raise Rejected("INVALID_TRANSITION", f"{what} {obj.id} is {obj.status}; cannot become {to}")
    obj.status = to
    obj.version += 1
    obj.updated_at = datetime.now(UTC)


def _create_order(s, p, actor):
    layout = load_layout(s.info.get("line_file") or Settings().line_file)  # the session's line's
    try:
        product = layout.product(p["productId"])
    except KeyError:
        raise Rejected("VALIDATION_ERROR", f"productId: unknown product {p['productId']!r}") from None
    code = p.get("code") or f"WO-{datetime.now(UTC):%Y%m%d%H%M%S%f}"
    if s.scalar(select(WorkOrder.id).where(WorkOrder.code == code)):
        raise Rejected("VALIDATION_ERROR", f"code: {code!r} exists")
    order = WorkOrder(code=code, product_id=product.id, route=[st.to_json() for st in product.route],
                      quantity=p["quantity"], priority=p.get("priority", 5))
    s.add(order)
    s.flush()
    s.refresh(order)
    return serialize.work_order(order), [("WorkOrderCreated", serialize.work_order(order))]


def _start_order(s, p, actor):
    order = _load(s, WorkOrder, p["workOrderId"], "work order")
    _transition(order, ("CREATED",), "RUNNING", "work order")
    order.started_at = datetime.now(UTC)
    events = [("WorkOrderStarted", None)]
    for n in range(1, order.quantity + 1):
        job = Job(work_order_id=order.id, seq_no=n)
        if n == 1:  # the first piece goes to the buffer at once
            job.status, job.position_type, job.temp_slot_no = "QUEUED", "ON_BUFFER", 1
        s.add(job)
        s.flush()
        s.refresh(job)
        events.append(("JobCreated", serialize.job(job)))
    s.flush()
    s.refresh(order)
    events[0] = ("WorkOrderStarted", serialize.work_order(order))
    return serialize.work_order(order), events


def _order_step(from_, to, event):
    def handle(s, p, actor):
        order = _load(s, WorkOrder, p["workOrderId"], "work order")
        _transition(order, from_, to, "work order")
        events = []
        if to == "CANCELLED":
            for job in s.scalars(select(Job).where(Job.work_order_id == order.id,
                                                   Job.status.not_in(JOB_TERMINAL))):
                job.status, job.temp_slot_no = "CANCELLED", None
                events.append(("JobCancelled", serialize.job(job)))
        s.flush()
        s.refresh(order)
        return serialize.work_order(order), [(event, serialize.work_order(order)), *events]

    return handle


def _job_step(s, p, actor, kind):
    job = _load(s, Job, p["jobId"], "job")
    if kind == "suspend":
        if job.status in JOB_TERMINAL or job.status == "SUSPENDED":
            raise Rejected("INVALID_TRANSITION", f"job {job.id} is {job.status}")
        job.held_status, job.status = job.status, "SUSPENDED"
    elif kind == "resume":
        if job.status != "SUSPENDED":
            raise Rejected("INVALID_TRANSITION", f"job {job.id} is {job.status}")
        job.status, job.held_status = job.held_status or "QUEUED", None
    else:
        if job.status in JOB_TERMINAL:
            raise Rejected("INVALID_TRANSITION", f"job {job.id} is {job.status}")
        job.step_index = p.get("stepIndex", job.step_index)
    job.version += 1
    s.flush()
    s.refresh(job)
    return serialize.job(job), [(f"Job{kind.title()}ed", serialize.job(job))]


def _written(s, row, to_json, event: str):
    """``row``, changed, is flushed: the command's result and its event, both ``to_json(row)``."""
    s.flush()
    return to_json(row), [(event, to_json(row))]


def _shelve_alarm(s, p, actor):
    alarm = _load(s, Alarm, p["alarmId"], "alarm")
    if alarm.status == "CLEARED":
        raise Rejected("INVALID_TRANSITION", f"alarm {alarm.id} is CLEARED")
    now = datetime.now(UTC)
    if alarm.status != "SHELVED":
        alarm.status_before_shelve = alarm.status
    alarm.status, alarm.shelved_until = "SHELVED", now + timedelta(minutes=p["minutes"])
    alarm.shelve_reason, alarm.shelved_by, alarm.shelved_at = p["reason"], actor, now
    return _written(s, alarm, serialize.alarm, "AlarmShelved")


def _unshelve_alarm(s, p, actor):
    alarm = _load(s, Alarm, p["alarmId"], "alarm")
    if alarm.status != "SHELVED":
        raise Rejected("INVALID_TRANSITION", f"alarm {alarm.id} is {alarm.status}, not SHELVED")
    alarm.status, alarm.status_before_shelve, alarm.shelved_until = alarm.status_before_shelve, None, None
    return _written(s, alarm, serialize.alarm, "AlarmUnshelved")


def _ack_alarm(s, p, actor):
    alarm = _load(s, Alarm, p["alarmId"], "alarm")
    if alarm.status != "RAISED":
        raise Rejected("INVALID_TRANSITION", f"alarm {alarm.id} is {alarm.status}")
    alarm.status, alarm.acknowledged_at, alarm.acknowledged_by = "ACKNOWLEDGED", datetime.now(UTC), actor
    return _written(s, alarm, serialize.alarm, "AlarmAcknowledged")


def _resolve(s, p, actor):
    action = _load(s, ManualAction, p["manualActionId"], "manual action")
    if action.status != "OPEN":
        raise Rejected("INVALID_TRANSITION", f"manual action {action.id} is {action.status}")
    if p["resolution"] not in (action.choices or []):
        raise Rejected("VALIDATION_ERROR", f"resolution: must be one of {action.choices}")
    if p["resolution"] in ("RESTART_CYCLE", "RETRY") and action.equipment_id is not None \
            and s.get(Equipment, action.equipment_id).status == "FAULT":
        # As the loop answers (PRODUCT.md, "Faults on the floor"): not while the PLC reports the fault.
        raise Rejected("EQUIPMENT_FAULTED", f"{action.equipment_id}: the PLC still reports a fault")
    action.status, action.resolution, action.note = "RESOLVED", p["resolution"], p.get("note")
    action.resolved_by, action.resolved_at = actor, datetime.now(UTC)
    return _written(s, action, serialize.manual_action, "ManualActionResolved")


def _confirm_recovery(s, p, actor):
    stmt = select(ManualAction).where(ManualAction.status == "OPEN", ManualAction.kind == "RECOVERY")
    if p.get("manualActionIds"):
        stmt = stmt.where(ManualAction.id.in_(p["manualActionIds"]))
    confirmed = []
    for action in s.scalars(stmt):
        action.status, action.resolution = "RESOLVED", "CONFIRMED"
        action.resolved_by, action.resolved_at = actor, datetime.now(UTC)
        confirmed.append(action.id)
    return {"confirmed": sorted(confirmed)}, [("RecoveryConfirmed", {"confirmed": sorted(confirmed)})]


def _assign_stop_reason(s, p, actor):
    """As the loop does it (issue 53): the real DBState transition and its event."""
    db = DBState(s.connection())
    try:
        row = db.assign_stop_reason(p["stopId"], p["reasonCode"], p.get("comment"), actor)
    except LoopRejected as exc:
        raise Rejected(exc.code, exc.message) from None
    return stop_json(row), db.events


HANDLERS = {
    "CreateOrder": _create_order,
    "StartOrder": _start_order,
    "PauseOrder": _order_step(("RUNNING",), "PAUSED", "WorkOrderPaused"),
    "ResumeOrder": _order_step(("PAUSED",), "RUNNING", "WorkOrderResumed"),
    "CancelOrder": _order_step(("CREATED", "RUNNING", "PAUSED"), "CANCELLED", "WorkOrderCancelled"),
    "SuspendJob": lambda s, p, a: _job_step(s, p, a, "suspend"),
    "ResumeJob": lambda s, p, a: _job_step(s, p, a, "resume"),
    "ReworkJob": lambda s, p, a: _job_step(s, p, a, "rework"),
    "AcknowledgeAlarm": _ack_alarm,
    "ShelveAlarm": _shelve_alarm,
    "UnshelveAlarm": _unshelve_alarm,
    "ResolveManualAction": _resolve,
    "ConfirmRecovery": _confirm_recovery,
    "AssignStopReason": _assign_stop_reason,
}


class StandInLineController:
    name = LINE_CONTROLLER
    db = Database()
    dispatch = EventDispatcher()

    # Tests set this to make the next commands answer QUEUED (the loop "too slow").
    answer_queued = False
    # Tests set this to a callable run as a command arrives (its caller waits for the answer).
    on_command = None
    line_file = None  # the line's layout; None: the default settings' line
    handled = 0
    _serial = threading.Lock()  # the loop is serial

    @rpc
    def command(self, type, payload, actor, command_id=None, wait_seconds=None):
        if StandInLineController.on_command is not None:
            StandInLineController.on_command()
        if StandInLineController.answer_queued:
            return {"commandId": command_id, "status": "QUEUED", "result": None, "error": None}
        with StandInLineController._serial:
            with self.db.begin() as s:
                s.info["line_file"] = self.line_file
                msg = LoopMessage(id=command_id, type=type, category="command", payload=payload,
                                  actor=actor)
                s.add(msg)
                try:
                    result, events = HANDLERS[type](s, payload, split_actor(actor)[0])
                except (Rejected, KeyError) as exc:
                    code = getattr(exc, "code", "VALIDATION_ERROR")
                    message = getattr(exc, "message", f"unknown command {type}")
                    msg.status, msg.error_code, msg.error_message = "REJECTED", code, message
                    msg.handled_at = datetime.now(UTC)
                    return {"commandId": command_id, "status": "REJECTED", "result": None,
                            "error": {"code": code, "message": message}}
                frames = append_events(s, events)
                msg.status, msg.result, msg.handled_at = "HANDLED", result, datetime.now(UTC)
            StandInLineController.handled += 1
            self.dispatch(LINE_EVENTS, {"txId": frames[0]["txId"], "events": frames})
        return {"commandId": command_id, "status": "HANDLED", "result": result, "error": None}

    @rpc
    def status(self):
        with self.db() as s:
            last = s.scalar(select(func.coalesce(func.max(EventLog.seq), 0)))
        return {"queueLength": 0, "lagSeconds": 0.0, "handledTotal": StandInLineController.handled,
                "lastSeq": last, "recovering": False}


class StandInHardware:
    """Answers ``status()`` like the hardware service with its PLC connected (``/readyz``)."""
    name = HARDWARE

    @rpc
    def status(self):
        return {"plcConnected": True, "actions": {"le": [0.5, 1.0], "series": {
            "DOCK_TO_BUFFER": {"count": 2, "sum": 1.2, "failures": 1, "buckets": [1, 2]}}}}


class EventWriter:
    """Writes event_log rows and publishes them as the loop would (as ``service``,
    the line's controller); answers the frames as the gateway serves them, naming
    the line (``line_id``: the default layout's line unless given)."""

    def __init__(self, sessionmaker, nameko_config: dict, *, service: str = LINE_CONTROLLER,
                 line_id: str | None = None):
        self.sessionmaker = sessionmaker
        self.publish = event_dispatcher(nameko_config)
        self.service = service
        self.line_id = line_id or load_layout(Settings().line_file).id

    def write(self, events: list[tuple[str, dict]], publish: bool = True) -> list[dict]:
        with self.sessionmaker.begin() as s:
            frames = append_events(s, events)
        if publish:
            self.publish(self.service, LINE_EVENTS, {"txId": frames[0]["txId"], "events": frames})
        return [{**frame, "lineId": self.line_id} for frame in frames]


def seed_line(sessionmaker, layout=None) -> None:
    """Equipment rows and slots from the layout (the default settings' unless
    given), as the loop does at start-up."""
    layout = layout or load_layout(Settings().line_file)
    with sessionmaker.begin() as s:
        for e in layout.equipment:
            s.add(Equipment(id=e.id, name=e.name, kind=e.kind, batch=e.batch, slot_count=e.slots))
            s.flush()
            for n in range(1, e.slots + 1):
                s.add(EquipmentSlot(equipment_id=e.id, slot_no=n))


# -- another line of a plant ------------------------------------------------------------


class LineDatabase(Database):
    """The Database of one line's schema: what its tables are named resolves there
    (as a line's controller connects, ``shared.db.lines``)."""

    def __init__(self, schema: str, pool_size: int = 5):
        super().__init__(pool_size)
        self.schema = schema

    def setup(self):
        self.engine = make_engine(self.container.config["LINECTL_DATABASE_URL"], pool_size=self.pool_size,
                                  schema=self.schema)
        self.sessionmaker = make_sessionmaker(self.engine)


def stand_ins_of_line(line_id: str, schema: str, line_file, *, plc_connected: bool = True) -> tuple[type, type]:
    """A stand-in line_controller and hardware service for a line that is not the
    default: named ``line_controller@<id>`` and ``hardware@<id>``, on the line's schema."""
    names = LineServices.of_line(line_id, default=False)
    controller = type(f"StandInLineController_{line_id}", (StandInLineController,),
                      {"name": names.line_controller, "db": LineDatabase(schema), "line_file": line_file})

    def status(self):
        return {"plcConnected": plc_connected, "plcError": None if plc_connected else "connection refused",
                "plcIdentity": line_id if plc_connected else None}  # what a simulator of the line serves

    hardware = type(f"StandInHardware_{line_id}", (StandInHardware,),
                    {"name": names.hardware, "status": rpc(status)})
    return controller, hardware


PLANT_LAYOUTS = ("line.yaml", "lines/cell-b.yaml", "lines/cell-c.yaml")  # demo-cell (public), cell-b, cell-c


def write_plant_file(path, deploy, plant_id: str):
    """A plant of the demo cell, cell-b and cell-c (the first keeps ``public``)."""
    path.write_text(f"plant: {{id: {plant_id}, name: {plant_id}}}\nlines:\n"
                    + "".join(f"  - layout: {deploy / layout}\n" for layout in PLANT_LAYOUTS))
    return path


def open_plant_lines(db_url: str, writable, plant) -> tuple[dict, dict, list]:
    """Every line's tables made and seeded as its controller would: ({line id:
    read-write sessions}, {line id: schema}, the engines to dispose)."""
    owner = make_engine(db_url, pool_size=1)
    with owner.begin() as conn:
        places = register_lines(conn, list(plant.line_ids), default=plant.default_line.id)
    owner.dispose()
    sessions, engines = {plant.default_line.id: writable}, []
    for line in plant.lines[1:]:
        engines.append(make_engine(db_url, pool_size=2, schema=places[line.id].schema))
        sessions[line.id] = make_sessionmaker(engines[-1])
        seed_line(sessions[line.id], line.layout)
    return sessions, {line_id: place.schema for line_id, place in places.items()}, engines
