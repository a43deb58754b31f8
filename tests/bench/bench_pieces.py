"""Piece records at plant scale (a plain script, not in the suite; issue 54).

Ten million generated pieces over 8 lines and 2 years (``BENCH_PIECES``; each
with 4 steps and 3 history entries: 10M + 40M + 30M rows), made with SQL
``generate_series`` in a throw-away database on the server
``BENCH_PIECES_SERVER`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``):
migrated to head, each line in its own schema as ``shared.db.lines`` makes it.
Then it times, through the code the API and the export run
(``shared.piece_query``):

- a lookup by serial (``GET /api/pieces/{serial}``): p50 / p99 (goal: p99 < 50 ms),
  and the same serial looked for on all 8 lines (``GET /api/plant/pieces``);
- "what else ran on this machine around then": a machine and a 1-hour window;
- a CSV export of a day, one line and all 8;
- the tables' and indexes' sizes;
- what the record adds to a loop transaction: ``close_transaction`` (the one
  statement that ends each loop transaction) and its COMMIT, for a machine's
  done and a robot move's success, with and without the piece record's CTEs;

and prints a table. ``BENCH_PIECES_KEEP=1`` keeps the database (a re-run reuses it).
"""

from __future__ import annotations

import contextlib
import csv
import io
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg2  # noqa: E402
from sqlalchemy import text  # noqa: E402

from services.line_controller.dbstate import DBState  # noqa: E402
from services.stack.migrate import upgrade  # noqa: E402
from shared import piece_query as pq  # noqa: E402
from shared import piece_record  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.db.lines import _copy_line_tables, quote  # noqa: E402

PIECES = int(os.environ.get("BENCH_PIECES", "10000000"))
SERVER = os.environ.get("BENCH_PIECES_SERVER", "postgresql://postgres@127.0.0.1:5432/postgres")
DATABASE = "linectl_bench_pieces"
LINES = [f"line{n}" for n in range(1, 9)]
START = datetime(2025, 1, 1, tzinfo=UTC)
YEARS = 2
LOOKUPS = 1000
WINDOWS = 200
TRANSACTIONS = 1000
INDEXES = {  # made after the rows are in (as a restore does): the migration's, by name
    "ix_piece_serial": "piece (serial)", "ix_piece_created_at": "piece (created_at, job_id)",
    "ix_piece_work_order_id": "piece (work_order_id, job_id)",
    "ix_piece_finished_at": "piece (finished_at) WHERE finished_at IS NOT NULL",
    "ix_piece_step_job_id": "piece_step (job_id, started_at)",
    "ix_piece_step_equipment_id": "piece_step (equipment_id, started_at)",
    "ix_piece_step_open": "piece_step (job_id) WHERE ended_at IS NULL",
    "ix_piece_entry_job_id": "piece_entry (job_id, id)",
}


def _url(database: str) -> str:
    base, _, _ = SERVER.rpartition("/")
    return f"{base}/{database}"


def _admin(sql: str) -> None:
    conn = psycopg2.connect(SERVER)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def schema_of(line: str) -> str:
    return "public" if line == LINES[0] else f"line_{line}"


def generate(engine) -> None:
    per_line = PIECES // len(LINES)
    spacing = timedelta(days=365 * YEARS) / per_line
    for n, line in enumerate(LINES):
        schema = schema_of(line)
        t0 = time.perf_counter()
        with engine.begin() as conn:
            if schema != "public":
                _copy_line_tables(conn, schema)
            conn.execute(text(f"SET LOCAL search_path TO {quote(schema)}, public"))
            for name in INDEXES:
                conn.execute(text(f"DROP INDEX IF EXISTS {name}"))
            params = {"base": (n + 1) * 10**9, "n": per_line, "t0": START, "gap": spacing, "line": line}
            conn.execute(text(
                "INSERT INTO piece (job_id, serial, work_order_id, work_order_code, product_id, status, created_at,"
                " finished_at) SELECT :base + g, 'SN' || upper(:line) || lpad(g::text, 9, '0'), :base / 1000 + g / 200,"
                " 'WO-' || (g / 200), 'BRACKET-A', CASE WHEN g % 20 = 0 THEN 'SCRAPPED' ELSE 'COMPLETED' END,"
                " :t0 + g * :gap, :t0 + g * :gap + interval '20 minutes' FROM generate_series(1, :n) AS g"), params)
            conn.execute(text(
                "INSERT INTO piece_step (job_id, step_index, kind, equipment_id, slot_no, started_at, ended_at,"
                " result, values) SELECT :base + g, k, (ARRAY['scan','machining','washing','inspection'])[k + 1],"
                " CASE k WHEN 0 THEN NULL WHEN 1 THEN 'MC' || (1 + g % 2) WHEN 2 THEN 'WASH1' ELSE 'INSP1' END,"
                " CASE k WHEN 0 THEN NULL ELSE 1 + g % 2 END, :t0 + g * :gap + k * interval '4 minutes',"
                " :t0 + g * :gap + k * interval '4 minutes' + interval '3 minutes',"
                " CASE WHEN k < 3 THEN 'DONE' WHEN g % 20 = 0 THEN 'FAIL' ELSE 'PASS' END,"
                " CASE k WHEN 0 THEN jsonb_build_object('code', 'SN' || upper(:line) || lpad(g::text, 9, '0'))"
                " ELSE '{}'::jsonb END FROM generate_series(1, :n) AS g, generate_series(0, 3) AS k"), params)
            conn.execute(text(
                "INSERT INTO piece_entry (job_id, category, at, detail) SELECT :base + g,"
                " (ARRAY['move','scan','mark'])[k + 1], :t0 + g * :gap + k * interval '6 minutes',"
                " CASE k WHEN 0 THEN '{\"kind\": \"DOCK_TO_BUFFER\", \"result\": \"SUCCEEDED\"}'::jsonb"
                " ELSE jsonb_build_object('result', 'SUCCEEDED', 'code', 'SN' || upper(:line) || lpad(g::text, 9, '0'))"
                " END FROM generate_series(1, :n) AS g, generate_series(0, 2) AS k"), params)
            conn.execute(text("SET LOCAL maintenance_work_mem = '1GB'"))
            for name, definition in INDEXES.items():
                table, _, rest = definition.partition(" ")
                conn.execute(text(f"CREATE INDEX {name} ON {table} {rest}"))
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in ("piece", "piece_step", "piece_entry"):
                conn.execute(text(f"VACUUM ANALYZE {quote(schema)}.{table}"))
        print(f"  {line}: {per_line} pieces in {time.perf_counter() - t0:.0f} s", flush=True)


@contextlib.contextmanager
def on_line(engine, line: str):
    with engine.begin() as conn:
        conn.execute(text(f"SET LOCAL search_path TO {quote(schema_of(line))}, public"))
        yield conn


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


def bench_lookups(engine, per_line: int) -> dict:
    rng = random.Random(54)
    one, plant = [], []
    for _ in range(LOOKUPS):
        line = rng.choice(LINES)
        serial = f"SN{line.upper()}{rng.randint(1, per_line):09d}"
        t = time.perf_counter()
        with on_line(engine, line) as conn:
            record = pq.piece_by_serial(conn, serial)
        one.append(time.perf_counter() - t)
        assert record is not None and len(record["steps"]) == 4, serial
    for _ in range(LOOKUPS // 10):
        line = rng.choice(LINES)
        serial = f"SN{line.upper()}{rng.randint(1, per_line):09d}"
        t = time.perf_counter()
        found = []
        for other in LINES:  # as /api/plant/pieces asks each line
            with on_line(engine, other) as conn:
                found += pq.list_pieces(conn, pq.PieceFilter(serial=serial), 500)[0]
        plant.append(time.perf_counter() - t)
        assert len(found) == 1
    return {"serial": percentiles(one), "plant": percentiles(plant)}


def bench_windows(engine) -> tuple[tuple[float, float], float]:
    rng = random.Random(7)
    samples, sizes = [], []
    for _ in range(WINDOWS):
        line = rng.choice(LINES)
        start = START + timedelta(seconds=rng.randint(0, 365 * YEARS * 86400 - 7200))
        t = time.perf_counter()
        with on_line(engine, line) as conn:
            items, _ = pq.list_pieces(conn, pq.PieceFilter(equipment_id="MC1", from_=start,
                                                           to=start + timedelta(hours=1)), 500)
        samples.append(time.perf_counter() - t)
        sizes.append(len(items))
    return percentiles(samples), statistics.mean(sizes)


def bench_export_day(engine, lines: list[str]) -> tuple[float, int, int]:
    day = START + timedelta(days=400)
    window = pq.PieceFilter(from_=day, to=day + timedelta(days=1))
    out, rows = io.StringIO(), 0
    writer = csv.writer(out)
    t = time.perf_counter()
    for line in lines:
        for record in pq.records(lambda line=line: on_line(engine, line), window, 1000):
            writer.writerow(pq.csv_row(line, record))
            rows += 1
    return time.perf_counter() - t, rows, len(out.getvalue())


def sizes(engine) -> list[tuple[str, int, int, int]]:
    out = []
    with engine.connect() as conn:
        for table in ("piece", "piece_step", "piece_entry"):
            rows = total = indexes = 0
            for line in LINES:
                name = f"{quote(schema_of(line))}.{table}"
                r = conn.execute(text(f"SELECT (SELECT reltuples FROM pg_class WHERE oid = '{name}'::regclass),"
                                      f" pg_table_size('{name}'), pg_indexes_size('{name}')")).one()
                rows, total, indexes = rows + int(r[0]), total + r[1], indexes + r[2]
            out.append((table, rows, total, indexes))
    return out


# Two loop transactions as the loop writes them: a machine's done; a robot move's success.
def _machine_done(job_id: int) -> list[tuple[str, dict]]:
    job = {"id": job_id, "workOrderId": 1, "seqNo": 1, "status": "WAITING_UNLOAD", "positionType": "ON_EQUIPMENT",
           "positionRefId": "MC1:1", "tempSlotNo": 1, "stepIndex": 1, "context": {}, "serial": f"SN{job_id}"}
    return [("SlotChanged", {"equipmentId": "MC1", "slotNo": 1, "status": "DONE", "currentJobId": job_id}),
            ("JobStatusChanged", job)]


def _moved(job_id: int, task_id: int) -> list[tuple[str, dict]]:
    job = {"id": job_id, "workOrderId": 1, "seqNo": 1, "status": "QUEUED", "positionType": "ON_BUFFER",
           "positionRefId": "1", "tempSlotNo": 1, "stepIndex": 2, "context": {}, "serial": f"SN{job_id}"}
    task = {"id": task_id, "kind": "EQUIPMENT_TO_BUFFER", "status": "SUCCEEDED", "jobId": job_id,
            "equipmentId": "MC1", "slotNo": 1, "params": {"jobIds": [job_id], "before": {}},
            "startedAt": "2026-01-01T00:00:00Z", "finishedAt": "2026-01-01T00:00:08Z"}
    return [("TaskSucceeded", task), ("SlotChanged", {"equipmentId": "MC1", "slotNo": 1, "status": "EMPTY",
                                                      "currentJobId": None}),
            ("JobMoved", {**job, "status": "MOVING"}), ("StepCompleted", job)]


def bench_loop(engine) -> dict[str, tuple[float, float]]:
    """close_transaction + COMMIT on the first line's tables (10M-scale indexes),
    with and without the piece record's CTEs, interleaved."""
    timings: dict[str, list[float]] = {"without": [], "with": []}
    real = piece_record.translate
    seq = [10**9]
    conn = engine.connect()
    try:
        for i in range(TRANSACTIONS):
            job_id = 10**9 + 1 + i
            for mode in ("with", "without"):
                piece_record.translate = real if mode == "with" else (lambda *_: piece_record.PieceChanges())
                events = _machine_done(job_id) if i % 2 else _moved(job_id, i)
                t = time.perf_counter()
                tx = conn.begin()
                db = DBState(conn)
                db.events = list(events)
                frames = db.close_transaction(None, status="HANDLED", first_seq=seq[0], tx_id=seq[0])
                tx.commit()
                timings[mode].append(time.perf_counter() - t)
                seq[0] += len(frames)
    finally:
        piece_record.translate = real
        conn.close()
    return {mode: percentiles(samples) for mode, samples in timings.items()}


def main() -> int:
    url = _url(DATABASE)
    fresh = True
    try:
        _admin(f"CREATE DATABASE {DATABASE}")
    except psycopg2.errors.DuplicateDatabase:
        fresh = False
    engine = make_engine(url, pool_size=2)
    try:
        per_line = PIECES // len(LINES)
        if fresh:
            print(f"generating {PIECES} pieces over {len(LINES)} lines and {YEARS} years ...", flush=True)
            upgrade(url)
            generate(engine)
        lookups = bench_lookups(engine, per_line)
        window, window_size = bench_windows(engine)
        one_day = bench_export_day(engine, LINES[:1])
        plant_day = bench_export_day(engine, LINES)
        loop = bench_loop(engine)
        table_sizes = sizes(engine)
    finally:
        engine.dispose()
        if not os.environ.get("BENCH_PIECES_KEEP"):
            _admin(f"DROP DATABASE IF EXISTS {DATABASE}")
    mib = 2**20
    print(f"\npiece records: {PIECES:,} pieces, {len(LINES)} lines, {YEARS} years ({per_line:,} a line)\n")
    print("| measure | p50 | p99 |")
    print("|---|---|---|")
    print(f"| lookup by serial, one line (`GET /api/pieces/{{serial}}`), {LOOKUPS} | "
          f"{lookups['serial'][0]:.2f} ms | {lookups['serial'][1]:.2f} ms |")
    print(f"| lookup by serial on all 8 lines (`/api/plant/pieces`), {LOOKUPS // 10} | "
          f"{lookups['plant'][0]:.2f} ms | {lookups['plant'][1]:.2f} ms |")
    print(f"| machine + 1-hour window (`?equipmentId=MC1&from=&to=`, {window_size:.0f} pieces), {WINDOWS} | "
          f"{window[0]:.2f} ms | {window[1]:.2f} ms |")
    for name, (seconds, rows, size) in (("one line", one_day), ("8 lines", plant_day)):
        print(f"| CSV export of a day, {name}: {rows:,} pieces, {size / mib:.1f} MiB | {seconds:.2f} s total | "
              f"{rows / seconds:,.0f} pieces/s |")
    for mode in ("without", "with"):
        print(f"| loop transaction: close_transaction + COMMIT, {mode} the piece record, {TRANSACTIONS} | "
              f"{loop[mode][0]:.3f} ms | {loop[mode][1]:.3f} ms |")
    print("\n| table | rows | table size | index size |")
    print("|---|---|---|---|")
    for table, rows, size, index in table_sizes:
        print(f"| {table} | {rows:,} | {size / mib:,.0f} MiB | {index / mib:,.0f} MiB |")
    goal = lookups["serial"][1] < 50.0
    print(f"\nserial lookup p99 {'meets' if goal else 'MISSES'} the 50 ms goal")
    return 0 if goal else 1


if __name__ == "__main__":
    sys.exit(main())
