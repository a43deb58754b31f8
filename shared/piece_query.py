"""Reading piece records (PRODUCT.md, "Piece traceability"): the lists the API
pages, a piece's whole record by its serial, and the record batches an export
streams. Each works on one line's tables (the caller's search_path is the
line's schema), and answers with ``shared.wire``-style camelCase JSON.

Lists are ordered by ``(createdAt, jobId)`` and paged by keyset on that pair
(``ix_piece_created_at``): a cursor is ``<createdAt in µs since the epoch>_<jobId>``.
"What else ran on this machine around then" (``equipmentId`` with a window)
reads ``ix_piece_step_equipment_id``: a step counts when it overlaps the window
and started at most ``STEP_LOOKBACK`` before it (a cycle longer than that is no
cycle of this cell)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import text

from shared.wire import iso

STEP_LOOKBACK = timedelta(days=1)
CURSOR = re.compile(r"^([0-9]{1,19})_([0-9]{1,19})$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class BadCursor(ValueError):
    """A cursor this module did not issue."""


@dataclass(frozen=True)
class PieceFilter:
    serial: str | None = None
    work_order_id: int | None = None
    statuses: tuple[str, ...] | None = None
    from_: datetime | None = None
    to: datetime | None = None
    equipment_id: str | None = None


def encode_cursor(created_at: datetime, job_id: int) -> str:
    delta = created_at - _EPOCH
    micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    return f"{micros}_{job_id}"


def decode_cursor(cursor: str) -> tuple[datetime, int]:
    match = CURSOR.match(cursor or "")
    if not match:
        raise BadCursor(cursor)
    micros, job_id = int(match.group(1)), int(match.group(2))
    try:
        return _EPOCH + timedelta(microseconds=micros), job_id
    except OverflowError:
        raise BadCursor(cursor) from None


def summary(row) -> dict:
    return {"serial": row.serial, "jobId": row.job_id, "workOrderId": row.work_order_id,
            "workOrderCode": row.work_order_code, "productId": row.product_id, "status": row.status,
            "createdAt": iso(row.created_at), "finishedAt": iso(row.finished_at)}


def step(row) -> dict:
    return {"stepIndex": row.step_index, "kind": row.kind, "equipmentId": row.equipment_id,
            "slotNo": row.slot_no, "startedAt": iso(row.started_at), "endedAt": iso(row.ended_at),
            "result": row.result, "values": row.values or {}}


def _where(f: PieceFilter, after: tuple[datetime, int] | None) -> tuple[str, dict]:
    clauses, params = [], {}

    def where(clause: str, **values) -> None:
        clauses.append(clause)
        params.update(values)

    if f.serial is not None:
        where("p.serial = :serial", serial=f.serial)
    if f.work_order_id is not None:
        where("p.work_order_id = :wo", wo=f.work_order_id)
    if f.statuses:
        where("p.status = ANY(:statuses)", statuses=list(f.statuses))
    if f.equipment_id is not None:
        window = ["s.equipment_id = :eq"]
        params["eq"] = f.equipment_id
        if f.to is not None:
            window.append("s.started_at < :to")
            params["to"] = f.to
        if f.from_ is not None:
            window += ["s.started_at >= :lookback", "(s.ended_at IS NULL OR s.ended_at > :from_)"]
            params.update(lookback=f.from_ - STEP_LOOKBACK, from_=f.from_)
        where(f"p.job_id IN (SELECT s.job_id FROM piece_step s WHERE {' AND '.join(window)})")
    else:
        if f.from_ is not None:
            where("p.created_at >= :from_", from_=f.from_)
        if f.to is not None:
            where("p.created_at < :to", to=f.to)
    if after is not None:
        where("(p.created_at, p.job_id) > (:after_at, :after_id)", after_at=after[0], after_id=after[1])
    return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def list_pieces(conn, f: PieceFilter, limit: int, cursor: str | None = None) -> tuple[list[dict], str | None]:
    """One page of summaries and the next page's cursor (None after the last)."""
    after = decode_cursor(cursor) if cursor else None
    where, params = _where(f, after)
    rows = conn.execute(text(f"SELECT p.* FROM piece p{where} ORDER BY p.created_at, p.job_id LIMIT :limit"),
                        {**params, "limit": limit}).all()
    items = [summary(r) for r in rows]
    if f.equipment_id is not None and rows:
        on_machine = _steps_of(conn, [r.job_id for r in rows], f.equipment_id)
        for item in items:
            item["steps"] = on_machine.get(item["jobId"], [])
    nxt = encode_cursor(rows[-1].created_at, rows[-1].job_id) if len(rows) == limit else None
    return items, nxt


def _steps_of(conn, job_ids: list[int], equipment_id: str | None = None) -> dict[int, list[dict]]:
    sql = "SELECT * FROM piece_step WHERE job_id = ANY(:ids)"
    if equipment_id is not None:
        sql += " AND equipment_id = :eq"
    out: dict[int, list[dict]] = {}
    for r in conn.execute(text(sql + " ORDER BY job_id, started_at, id"), {"ids": job_ids, "eq": equipment_id}):
        out.setdefault(r.job_id, []).append(step(r))
    return out


def _entries_of(conn, job_ids: list[int]) -> dict[int, list]:
    out: dict[int, list] = {}
    for r in conn.execute(text("SELECT * FROM piece_entry WHERE job_id = ANY(:ids) ORDER BY job_id, id"),
                          {"ids": job_ids}):
        out.setdefault(r.job_id, []).append(r)
    return out


def finished_summaries(conn, job_ids: list[int]) -> list[dict]:
    """The summaries of the pieces ``job_ids`` names, each with its ``steps``, in the
    order given (what a finished piece publishes on the line's events, docs/uns.md);
    a job without a record is left out."""
    if not job_ids:
        return []
    rows = {r.job_id: r for r in conn.execute(text("SELECT * FROM piece WHERE job_id = ANY(:ids)"),
                                              {"ids": list(job_ids)})}
    steps = _steps_of(conn, list(rows))
    return [{**summary(rows[j]), "steps": steps.get(j, [])} for j in job_ids if j in rows]


def last_finished(conn) -> dict | None:
    """The newest finished piece's summary with its steps (None: none finished yet)."""
    job_id = conn.execute(text("SELECT job_id FROM piece WHERE finished_at IS NOT NULL"
                               " ORDER BY finished_at DESC, job_id DESC LIMIT 1")).scalar()
    return finished_summaries(conn, [job_id])[0] if job_id is not None else None


HISTORY = ("moves", "scans", "marks", "alarms", "answers")
_CATEGORY = {"move": "moves", "scan": "scans", "mark": "marks", "alarm": "alarms", "answer": "answers"}


def _record(row, steps: list[dict], entries: list) -> dict:
    record = {**summary(row), "steps": steps, **{k: [] for k in HISTORY}}
    for e in entries:
        detail = dict(e.detail or {})
        if e.category == "answer":  # the contract's shape: {manualActionId, kind, resolution, by, at}
            detail["at"] = detail.get("at") or iso(e.at)
            record["answers"].append(detail)
        else:
            record[_CATEGORY[e.category]].append({"at": iso(e.at), **detail})
    return record


def piece_by_serial(conn, serial: str) -> dict | None:
    """The whole record of the newest piece with ``serial`` (a label seen twice on a
    line: its latest piece; ``list_pieces`` with the serial lists them all)."""
    row = conn.execute(text("SELECT * FROM piece WHERE serial = :s ORDER BY created_at DESC, job_id DESC LIMIT 1"),
                       {"s": serial}).first()
    if row is None:
        return None
    return _record(row, _steps_of(conn, [row.job_id]).get(row.job_id, []),
                   _entries_of(conn, [row.job_id]).get(row.job_id, []))


def records(conn_factory, f: PieceFilter, batch: int = 1000):
    """Every matching piece's whole record, in list order, read in keyset batches
    of ``batch`` pieces, each batch in a transaction of its own (``conn_factory()``:
    a context manager giving a connection on the line's tables): memory and
    transactions stay small however many pieces there are."""
    after = None
    while True:
        with conn_factory() as conn:
            where, params = _where(f, after)
            rows = conn.execute(text(f"SELECT p.* FROM piece p{where} ORDER BY p.created_at, p.job_id "
                                     "LIMIT :limit"), {**params, "limit": batch}).all()
            if not rows:
                return
            ids = [r.job_id for r in rows]
            steps, entries = _steps_of(conn, ids), _entries_of(conn, ids)
        for r in rows:
            yield _record(r, steps.get(r.job_id, []), entries.get(r.job_id, []))
        if len(rows) < batch:
            return
        after = (rows[-1].created_at, rows[-1].job_id)


CSV_COLUMNS = ("lineId", "serial", "jobId", "workOrderId", "workOrderCode", "productId", "status", "createdAt",
               "finishedAt", "steps", *HISTORY)


def csv_row(line_id: str, record: dict) -> list:
    """A record as one CSV row of ``CSV_COLUMNS``: its steps and history as JSON."""
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    return [line_id, *(record[k] for k in CSV_COLUMNS[1:9]),
            *(json.dumps(record[k], **compact) for k in CSV_COLUMNS[9:])]
