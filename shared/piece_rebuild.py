"""Piece records for a database from before them (migration 0012): the same
translation as the loop's (:mod:`shared.piece_record`), run over what each
line's event log still holds, transaction by transaction."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import text

from shared.piece_record import PieceChanges, Translation, read_events, write

REBUILD_BATCH = 2000  # transactions read per round; rows written per statement


@dataclass
class RebuildCount:
    finished: int = 0  # finished jobs (COMPLETED, SCRAPPED, CANCELLED) in the database
    rebuilt: int = 0  # of those, the ones whose whole history the log still held
    not_rebuilt: int = 0  # the others: a record with the job's own facts, the history the log still had

    def as_text(self, line_id: str | None) -> str:
        return (f"line {line_id or '?'}: {self.finished} finished pieces, {self.rebuilt} records rebuilt from "
                f"the event log, {self.not_rebuilt} could not be rebuilt (their events were purged)")


def _in_memory_alarm_jobs(t: Translation, alarm: dict) -> list[int]:
    """An alarm's pieces as the log says they were placed then (the rebuild has no slots of the time)."""
    if alarm["scope"] == "job":
        return [int(alarm["ref"])]
    jobs = []
    for job_id, job in t.latest.items():
        if alarm["scope"] == "equipment":
            machine = (job.get("positionRefId") or "").rpartition(":")[0]
            if job.get("positionType") == "ON_EQUIPMENT" and machine == alarm["ref"]:
                jobs.append(job_id)
        elif (job.get("status") not in ("COMPLETED", "SCRAPPED", "CANCELLED", "PENDING")
              and job.get("positionType") not in ("ON_DOCK", "OUT")):
            jobs.append(job_id)
    return jobs


def _flush(conn, t: Translation, *, final: bool) -> None:
    out = t.out
    for alarm in out.alarms:
        for job_id in _in_memory_alarm_jobs(t, alarm):
            t.entry(job_id, "alarm", alarm["detail"])
    open_steps = {id(s) for s in t.open_here.values()}
    done = [s for s in out.steps if final or id(s) not in open_steps]
    for s in done:
        s["ifNoneOpen"] = False
    rows = PieceChanges(pieces=out.pieces, steps=done, entries=out.entries)
    for chunk in range(0, max(len(rows.steps), len(rows.entries), 1), REBUILD_BATCH):
        part = PieceChanges(pieces=rows.pieces if chunk == 0 else {},
                            steps=rows.steps[chunk:chunk + REBUILD_BATCH],
                            entries=rows.entries[chunk:chunk + REBUILD_BATCH])
        write(conn, part, t.at)
    t.out = PieceChanges(steps=[s for s in out.steps if not final and id(s) in open_steps])
    # ``latest`` stays: later alarms place pieces from it


def _by_transaction(rows):
    group: list = []
    for r in rows:
        if group and r.tx_id != group[0].tx_id:
            yield group
            group = []
        group.append(r)
    if group:
        yield group


def rebuild_from_log(conn, line_id: str | None) -> RebuildCount:
    """Records for a line's jobs from what its event log still holds (``conn``'s
    search_path is the line's schema). Run once, by migration 0012, on tables
    that have no records yet. Every job gets its record (its serial, order,
    status and times from its row); its history is what the log still has."""
    conn.execute(text(
        "UPDATE job SET serial = COALESCE(NULLIF(context->>'barcode', ''), concat_ws('-', CAST(:line AS text), "
        "  (SELECT code FROM work_order w WHERE w.id = job.work_order_id), seq_no)) WHERE serial IS NULL"),
        {"line": line_id})
    created = set()
    t = Translation(datetime.min)
    after = 0
    while True:
        rows = conn.execute(text(
            "SELECT tx_id, at, type, payload FROM event_log WHERE tx_id IN ("
            "  SELECT DISTINCT tx_id FROM event_log WHERE tx_id > :after ORDER BY tx_id LIMIT :n) "
            "ORDER BY seq"), {"after": after, "n": REBUILD_BATCH}).all()
        if not rows:
            break
        for tx_rows in _by_transaction(rows):
            events = [(r.type, r.payload) for r in tx_rows]
            t.at = tx_rows[0].at
            t.closed_before = set()  # nothing was written before: a close ends only steps in memory
            read_events(t, events)
            created.update(p["id"] for type_, p in events if type_ == "JobCreated")
        after = rows[-1].tx_id
        _flush(conn, t, final=False)
    _flush(conn, t, final=True)
    # Every job has its record, also one whose every event was purged (its own row's facts).
    conn.execute(text(
        "INSERT INTO piece (job_id, serial, work_order_id, work_order_code, product_id, status, created_at, "
        "  finished_at) SELECT j.id, j.serial, j.work_order_id, w.code, w.product_id, j.status, j.created_at, "
        "  j.finished_at FROM job j JOIN work_order w ON w.id = j.work_order_id "
        "ON CONFLICT (job_id) DO UPDATE SET serial = EXCLUDED.serial, status = EXCLUDED.status, "
        "  created_at = EXCLUDED.created_at, finished_at = EXCLUDED.finished_at"))
    finished = conn.execute(text(
        "SELECT id FROM job WHERE status IN ('COMPLETED', 'SCRAPPED', 'CANCELLED')")).scalars().all()
    count = RebuildCount(finished=len(finished))
    count.rebuilt = sum(1 for job_id in finished if job_id in created)
    count.not_rebuilt = count.finished - count.rebuilt
    return count
