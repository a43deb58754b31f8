"""Piece records (PRODUCT.md, "Piece traceability"): what one loop transaction's
events add to the pieces' histories, and the SQL that writes it.

The loop writes a transaction's records in the statement that ends it
(``DBState.close_transaction``), so a record is committed with the change it
records, and costs no round trip of its own. :func:`translate` turns the
transaction's events (the same ``(type, payload)`` pairs that go to
``event_log``) into rows; :func:`write_sql` is the SQL, as CTEs the loop adds to
its statement. The upgrade of a database from before piece records
(``shared.piece_rebuild``, migration 0012) runs the same translation over what the
event log still holds, transaction by transaction.

What a step is: a machine step runs from the loop's start of the cycle (the job
claimed ``PROCESSING`` on the machine) to the slot's ``DONE``; a tool step (SCAN,
MARK) from the claim to the action's result. Its ``result``: ``DONE``, an
inspection's ``PASS`` / ``FAIL`` / ``UNDECIDED`` (``values``: the details the PLC
gave), ``FAILED`` (a tool action failed), or ``ABORTED`` (the cycle was stopped
and not finished: a fault answered, a scrap, a restart)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import text

JOB_EVENTS = ("JobCreated", "JobClaimed", "JobMoved", "JobStatusChanged", "JobContextChanged",
              "StepCompleted", "JobFinished")
TOOL_TASKS = ("SCAN", "MARK")
MOVE_TASKS = ("DOCK_TO_BUFFER", "BUFFER_TO_EQUIPMENT", "EQUIPMENT_TO_BUFFER", "SWAP", "BUFFER_TO_DOCK")
# Alarms without a piece or machine of their own stop the whole cell: every piece in it.
IN_CELL = "IN_CELL"


def _instant(value) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value))
    except ValueError:
        return None


@dataclass
class PieceChanges:
    """One transaction's additions to the piece records."""

    pieces: dict[int, dict] = field(default_factory=dict)  # job id → the piece's row as it is now
    closes: list[dict] = field(default_factory=list)  # the open step (of an earlier transaction) ends
    steps: list[dict] = field(default_factory=list)  # steps begun here (perhaps ended here too)
    entries: list[dict] = field(default_factory=list)  # moves, scans, marks, answers (by job)
    alarms: list[dict] = field(default_factory=list)  # alarms, each to the pieces its scope names

    def __bool__(self) -> bool:
        return bool(self.pieces or self.closes or self.steps or self.entries or self.alarms)


class Translation:
    def __init__(self, at: datetime):
        self.at = at
        self.out = PieceChanges()
        self.open_here: dict[int, dict] = {}  # job → its step begun in this transaction, still open
        self.closed_before: set[int] = set()  # jobs whose earlier open step this transaction ended
        self.latest: dict[int, dict] = {}  # job → its payload as of the event being read

    # -- steps -----------------------------------------------------------------------

    def close(self, job_id: int, result: str, values: dict | None = None) -> None:
        step = self.open_here.pop(job_id, None)
        if step is not None:
            step.update(endedAt=self.at, result=result, values=values or {})
            if not step["ifNoneOpen"]:
                return
            # Begun only if none was open: if one was, it is the one that ends now.
        if job_id not in self.closed_before:
            self.closed_before.add(job_id)
            self.out.closes.append({"jobId": job_id, "result": result, "values": values or {}})

    def start(self, job: dict, *, restart: bool) -> None:
        """``restart``: the loop started this step's work now (a claim), so a step
        still open is over (ABORTED). Otherwise (a held cycle released) a new step
        begins only where none is open."""
        job_id = job["id"]
        if restart:
            self.close(job_id, "ABORTED")
        elif job_id in self.open_here:
            return
        equipment_id, slot_no = None, None
        if job.get("positionType") == "ON_EQUIPMENT" and job.get("positionRefId"):
            equipment_id, _, slot = job["positionRefId"].rpartition(":")
            slot_no = int(slot) if slot.isdigit() else None
        step = {"jobId": job_id, "workOrderId": job["workOrderId"], "stepIndex": job.get("stepIndex", 0),
                "equipmentId": equipment_id, "slotNo": slot_no, "startedAt": self.at, "endedAt": None,
                "result": None, "values": {},
                # none open before this transaction, or it was ended here: no need to look
                "ifNoneOpen": job_id not in self.closed_before}
        self.out.steps.append(step)
        self.open_here[job_id] = step

    def inspected_now(self, job_id: int) -> dict | None:
        """The verdict the PLC gave in this transaction, if any (``inspection_result``)."""
        inspection = (self.latest.get(job_id, {}).get("context") or {}).get("inspection")
        if inspection and _instant(inspection.get("at")) == self.at:
            return inspection
        return None

    # -- events ----------------------------------------------------------------------

    def job_event(self, type_: str, job: dict) -> None:
        job_id = job["id"]
        self.latest[job_id] = job
        self.out.pieces[job_id] = {
            "jobId": job_id, "serial": job.get("serial"), "workOrderId": job["workOrderId"],
            "status": job["status"], "createdAt": job.get("createdAt"), "finishedAt": job.get("finishedAt")}
        if type_ == "JobClaimed" and job["status"] == "PROCESSING":
            self.start(job, restart=True)
        elif (type_ == "JobStatusChanged" and job["status"] == "PROCESSING"
              and job.get("positionType") == "ON_EQUIPMENT"):
            self.start(job, restart=False)  # a held cycle's piece running again (a retried start)
        elif type_ == "JobFinished" and job["status"] != "COMPLETED":
            self.close(job_id, "ABORTED")

    def slot_done(self, slot: dict) -> None:
        job_id = slot.get("currentJobId")
        if job_id is None:
            return
        context = self.latest.get(job_id, {}).get("context") or {}
        if context.get("afterFault"):  # a stopped cycle's piece, marked DONE to be unloaded
            self.close(job_id, "ABORTED")
            return
        inspection = self.inspected_now(job_id)
        if inspection is None:
            self.close(job_id, "DONE")
        else:
            verdict = {True: "PASS", False: "FAIL"}.get(inspection.get("pass"), "UNDECIDED")
            self.close(job_id, verdict, inspection.get("details") or {})

    def task_ended(self, task: dict, succeeded: bool, finals: dict[int, dict]) -> None:
        params = task.get("params") or {}
        job_ids = params.get("jobIds") or ([task["jobId"]] if task.get("jobId") is not None else [])
        kind = task["kind"]
        outcome = "SUCCEEDED" if succeeded else "FAILED"
        if kind in TOOL_TASKS:
            for job_id in job_ids:
                if kind == "SCAN":
                    code = (finals.get(job_id, {}).get("context") or {}).get("barcode") if succeeded else None
                    values = {"code": code}
                else:
                    values = {"text": params.get("text")}
                self.close(job_id, "DONE" if succeeded else "FAILED", values)
                self.entry(job_id, kind.lower(), {"taskId": task["id"], "result": outcome,
                                                  "errorCode": task.get("errorCode"), **values})
        elif kind in MOVE_TASKS:
            before = params.get("before") or {}
            for job_id in job_ids:
                was = before.get(str(job_id)) or {}
                self.entry(job_id, "move", {
                    "taskId": task["id"], "kind": kind, "result": outcome, "equipmentId": task.get("equipmentId"),
                    "slotNo": task.get("slotNo"), "bufferSlot": params.get("bufferSlot", was.get("tempSlotNo")),
                    "startedAt": task.get("startedAt"), "finishedAt": task.get("finishedAt"),
                    "errorCode": task.get("errorCode")})

    def answered(self, action: dict) -> None:
        context = action.get("context") or {}
        job_ids = [action.get("jobId"), *(context.get("jobIds") or []),
                   *((p or {}).get("jobId") for p in context.get("pieces") or [] if isinstance(p, dict))]
        seen: set[int] = set()
        for job_id in job_ids:
            if isinstance(job_id, int) and job_id not in seen:
                seen.add(job_id)
                self.entry(job_id, "answer", {
                    "manualActionId": action["id"], "kind": action["kind"], "resolution": action.get("resolution"),
                    "by": action.get("resolvedBy"), "at": action.get("resolvedAt"), "note": action.get("note")})

    def alarm(self, alarm: dict) -> None:
        scope = ("job", str(alarm["jobId"])) if alarm.get("jobId") is not None else (
            ("equipment", alarm["equipmentId"]) if alarm.get("equipmentId") else ("cell", IN_CELL))
        self.out.alarms.append({"scope": scope[0], "ref": scope[1], "at": self.at, "detail": {
            "alarmId": alarm["id"], "code": alarm["code"], "severity": alarm.get("severity"),
            "message": alarm.get("message"), "equipmentId": alarm.get("equipmentId"),
            "facts": alarm.get("facts") or {}}})

    def entry(self, job_id: int, category: str, detail: dict) -> None:
        self.out.entries.append({"jobId": job_id, "category": category, "at": self.at, "detail": detail})


def translate(events, at: datetime) -> PieceChanges:
    """What ``events`` (one transaction's ``(type, payload)`` pairs, in order, at
    ``at``) add to the piece records."""
    t = Translation(at)
    read_events(t, events)
    return t.out


def read_events(t: Translation, events) -> None:
    finals: dict[int, dict] = {}  # each job as the transaction leaves it (a SCAN's code comes after its result)
    for type_, payload in events:
        if type_ in JOB_EVENTS:
            finals[payload["id"]] = payload
    for type_, payload in events:
        if type_ in JOB_EVENTS:
            t.job_event(type_, payload)
        elif type_ == "SlotChanged" and payload.get("status") == "DONE":
            t.slot_done(payload)
        elif type_ in ("TaskSucceeded", "TaskFailed"):
            t.task_ended(payload, type_ == "TaskSucceeded", finals)
        elif type_ == "ManualActionResolved":
            t.answered(payload)
        elif type_ == "AlarmRaised":
            t.alarm(payload)


# -- the SQL ------------------------------------------------------------------------

def _json(value) -> str:
    return json.dumps(value, separators=(",", ":"), default=str)


_PIECES = (
    "pr_piece AS (INSERT INTO piece AS p (job_id, serial, work_order_id, work_order_code, product_id, status, "
    "  created_at, finished_at) "
    "SELECT f.job_id, COALESCE(f.serial, j.serial, concat_ws('-', w.code, j.seq_no)), f.work_order_id, w.code, "
    "  w.product_id, f.status, COALESCE(f.created_at, :pr_at), f.finished_at "
    "FROM jsonb_to_recordset(CAST(:pr_pieces AS jsonb)) AS f(job_id bigint, serial text, work_order_id bigint, "
    "  status text, created_at timestamptz, finished_at timestamptz) "
    "LEFT JOIN work_order w ON w.id = f.work_order_id LEFT JOIN job j ON j.id = f.job_id "
    "ON CONFLICT (job_id) DO UPDATE SET serial = COALESCE(EXCLUDED.serial, p.serial), status = EXCLUDED.status, "
    "  finished_at = EXCLUDED.finished_at)")
_CLOSES = (
    "pr_close AS (UPDATE piece_step s SET ended_at = :pr_at, result = f.result, values = f.values "
    "FROM jsonb_to_recordset(CAST(:pr_closes AS jsonb)) AS f(job_id bigint, result text, values jsonb) "
    "WHERE s.job_id = f.job_id AND s.ended_at IS NULL)")
_STEPS = (
    "pr_step AS (INSERT INTO piece_step (job_id, step_index, kind, equipment_id, slot_no, started_at, ended_at, "
    "  result, values) "
    "SELECT f.job_id, f.step_index, COALESCE(w.route -> f.step_index ->> 'equipmentKind', "
    "  w.route -> f.step_index ->> 'op', '?'), f.equipment_id, f.slot_no, f.started_at, f.ended_at, f.result, "
    "  COALESCE(f.values, '{}') "
    "FROM jsonb_to_recordset(CAST(:pr_steps AS jsonb)) AS f(job_id bigint, work_order_id bigint, step_index int, "
    "  equipment_id text, slot_no int, started_at timestamptz, ended_at timestamptz, result text, values jsonb, "
    "  if_none_open boolean) "
    "LEFT JOIN work_order w ON w.id = f.work_order_id "
    "WHERE NOT (f.if_none_open AND EXISTS (SELECT 1 FROM piece_step o WHERE o.job_id = f.job_id "
    "  AND o.ended_at IS NULL)))")
_ENTRIES = (
    "pr_entry AS (INSERT INTO piece_entry (job_id, category, at, detail) "
    "SELECT f.job_id, f.category, f.at, f.detail "
    "FROM jsonb_to_recordset(CAST(:pr_entries AS jsonb)) AS f(job_id bigint, category text, at timestamptz, "
    "  detail jsonb))")
# An alarm goes to its piece; a machine's, to the pieces on that machine; the line's
# (robot, PLC), to every piece in the cell (off the dock, not finished).
_ALARMS = (
    "pr_alarm AS (INSERT INTO piece_entry (job_id, category, at, detail) "
    "SELECT x.job_id, 'alarm', f.at, f.detail "
    "FROM jsonb_to_recordset(CAST(:pr_alarms AS jsonb)) AS f(scope text, ref text, at timestamptz, detail jsonb) "
    "CROSS JOIN LATERAL ("
    "  SELECT CAST(f.ref AS bigint) AS job_id WHERE f.scope = 'job' "
    "  UNION SELECT s.current_job_id FROM equipment_slot s WHERE f.scope = 'equipment' "
    "    AND s.equipment_id = f.ref AND s.current_job_id IS NOT NULL "
    "  UNION SELECT j.id FROM job j WHERE f.scope = 'cell' AND j.status NOT IN ('COMPLETED', 'SCRAPPED', "
    "    'CANCELLED', 'PENDING') AND j.position_type NOT IN ('ON_DOCK', 'OUT')) AS x)")


def _snake(rows: list[dict]) -> list[dict]:
    return [{"".join("_" + c.lower() if c.isupper() else c for c in k): v for k, v in r.items()} for r in rows]


def write_sql(changes: PieceChanges, at: datetime) -> tuple[list[str], dict]:
    """The CTEs (named ``pr_*``) that write ``changes``, and their parameters.
    Only what the transaction has: most transactions touch no piece and add nothing."""
    ctes, params = [], {"pr_at": at}
    if changes.pieces:
        ctes.append(_PIECES)
        params["pr_pieces"] = _json(_snake(list(changes.pieces.values())))
    if changes.closes:
        ctes.append(_CLOSES)
        params["pr_closes"] = _json(_snake(changes.closes))
    if changes.steps:
        ctes.append(_STEPS)
        params["pr_steps"] = _json(_snake(changes.steps))
    if changes.entries:
        ctes.append(_ENTRIES)
        params["pr_entries"] = _json(_snake(changes.entries))
    if changes.alarms:
        ctes.append(_ALARMS)
        params["pr_alarms"] = _json(changes.alarms)
    return ctes, params


_PREPARED_NAME = "linectl_piece_record"
_PREPARED_PARAMS = ("pr_pieces", "pr_closes", "pr_steps", "pr_entries", "pr_alarms", "pr_at")


def _prepared_sql() -> str:
    sql = "WITH " + ", ".join((_PIECES, _CLOSES, _STEPS, _ENTRIES, _ALARMS)) + " SELECT 1"
    for n, name in enumerate(_PREPARED_PARAMS, 1):
        sql = sql.replace(f":{name}", f"${n}")
    return sql


def write_prepared(conn, changes: PieceChanges, at: datetime) -> None:
    """Write ``changes`` with one statement prepared once per connection (the loop's):
    planning the five CTEs anew was most of what a record cost a transaction
    (tests/bench/bench_pieces.py). Nothing when the transaction touched no piece."""
    if not changes:
        return
    info = conn.info  # per DBAPI connection: survives pool check-outs
    if not info.get("piece_record_prepared"):
        conn.exec_driver_sql(f"PREPARE {_PREPARED_NAME} (jsonb, jsonb, jsonb, jsonb, jsonb, timestamptz) AS "
                             + _prepared_sql().replace("%", "%%"))
        info["piece_record_prepared"] = True
    rows = {"pieces": _snake(list(changes.pieces.values())), "closes": _snake(changes.closes),
            "steps": _snake(changes.steps), "entries": _snake(changes.entries), "alarms": changes.alarms}
    conn.exec_driver_sql(
        f"EXECUTE {_PREPARED_NAME} (%(pieces)s, %(closes)s, %(steps)s, %(entries)s, %(alarms)s, %(at)s)",
        {**{k: _json(v) for k, v in rows.items()}, "at": at})


def write(conn, changes: PieceChanges, at: datetime) -> None:
    """Write ``changes`` in a statement of their own (the upgrade's rebuild)."""
    ctes, params = write_sql(changes, at)
    if ctes:
        conn.execute(text("WITH " + ", ".join(ctes) + " SELECT 1"), params)
