"""Shifts and OEE on a long history (a plain script; issue 53).

    .venv/bin/python tests/bench/bench_oee.py [--lines 8] [--days 30] [--requests 20] [--transactions 2000]

1. ``GET /api/plant/oee?by=shift`` over ``--days`` of ``--lines`` lines (copies of
   deploy/lines/cell-a.yaml in schemas of their own, as ``linectl migrate``
   places them), with a generated history of a real density: a piece a minute
   (one in twenty scrapped) and 20 stops per 8-hour shift (2 minutes each, two
   in three with a reason), running between; the calendar of deploy/plant.yaml
   (three shifts, breaks). Timed through the gateway's Flask app: p50 and p99.
2. What the state tracking adds to a loop transaction: the same transaction (a
   job's context patched, its event, ``close_transaction``) with
   ``DBState.track_line`` and with it made a no-op, interleaved: p50 and p99 of
   each, and the difference.

PostgreSQL is embedded unless LINECTL_TEST_DATABASE_URL is set.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402
from sqlalchemy import text  # noqa: E402

from gateway.app import create_app  # noqa: E402
from services.line_controller.dbstate import DBState  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.db.lines import quote, register_lines  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402

TOKEN = "operator-token-bench-oee-01"
CAUSES = ("EQUIPMENT_FAULT", "MANUAL_ACTION", "ESTOP", "PLC_DISCONNECTED")
REASONS = ("MECHANICAL", "ELECTRICAL", None)


def write_plant(directory: Path, count: int) -> Path:
    source = yaml.safe_load((ROOT / "deploy" / "plant.yaml").read_text())
    layout = (ROOT / "deploy" / "lines" / "cell-a.yaml").read_text()
    lines = []
    for n in range(1, count + 1):
        (directory / f"line-{n}.yaml").write_text(layout.replace("id: cell-a", f"id: line-{n}", 1))
        lines.append({"layout": f"line-{n}.yaml", "plc": "sim"})
    plant = {"plant": {"id": "bench", "name": "Bench"}, "lines": lines,
             **{k: source[k] for k in ("timezone", "shifts", "breaks", "downtimeReasons")}}
    path = directory / "plant.yaml"
    path.write_text(yaml.safe_dump(plant, allow_unicode=True))
    return path


def seed_line(conn, schema: str, n: int, days: int) -> None:
    """A piece a minute and a stop every 24 minutes (20 per 8 hours) over ``days``."""
    conn.execute(text(f"SET LOCAL search_path TO {quote(schema)}, public"))
    order = 1_000_000 * n
    conn.execute(text("INSERT INTO work_order (id, code, product_id, route, quantity, status) "
                      "VALUES (:id, :code, 'BRACKET-A', '[]', 10000, 'RUNNING')"),
                 {"id": order, "code": f"WO-BENCH-{n}"})
    conn.execute(text(
        "INSERT INTO job (id, work_order_id, seq_no, status, position_type, step_index, finished_at) "
        "SELECT :o + k, :o, k, CASE WHEN k % 20 = 0 THEN 'SCRAPPED' ELSE 'COMPLETED' END, 'OUT', 5, "
        "now() - make_interval(days => :d) + make_interval(mins => k) FROM generate_series(1, :pieces) AS k"),
        {"o": order, "d": days, "pieces": days * 24 * 60})
    conn.execute(text(
        "INSERT INTO line_state_interval (state, cause, equipment_id, started_at, ended_at, seen_at, reason_code) "
        "SELECT s.state, s.cause, s.e, s.a, s.b, s.b, s.r FROM generate_series(0, :stops - 1) AS k, LATERAL ("
        "  SELECT 'RUNNING' AS state, NULL AS cause, NULL AS e, NULL AS r, "
        "    now() - make_interval(days => :d) + make_interval(mins => 24 * k) AS a, "
        "    now() - make_interval(days => :d) + make_interval(mins => 24 * k + 22) AS b "
        "  UNION ALL SELECT 'DOWN', (:causes)[1 + k % 4], 'MC1', (:reasons)[1 + k % 3], "
        "    now() - make_interval(days => :d) + make_interval(mins => 24 * k + 22), "
        "    now() - make_interval(days => :d) + make_interval(mins => 24 * k + 24)) s"),
        {"d": days, "stops": days * 60, "causes": list(CAUSES), "reasons": list(REASONS)})
    conn.execute(text("SET LOCAL search_path TO DEFAULT"))


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]


def time_plant_oee(url: str, plant_file: Path, days: int, requests: int) -> tuple[float, float, int]:
    app = create_app(load_settings({"LINECTL_DATABASE_URL": url, "LINECTL_TOKENS": f"operator:{TOKEN}",
                                    "LINECTL_PLANT_FILE": str(plant_file)}))
    client = app.test_client()
    query = {"by": "shift", "from": f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(time.time() - days * 86400))}"}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = client.get("/api/plant/oee", query_string=query, headers=auth).get_json()  # warm
    samples = []
    for _ in range(requests):
        t0 = time.perf_counter()
        r = client.get("/api/plant/oee", query_string=query, headers=auth)
        samples.append((time.perf_counter() - t0) * 1000)
        assert r.status_code == 200, r.get_json()
    app.extensions["linectl"].close()
    return *percentiles(samples), len(body["items"])


def time_tracking(url: str, transactions: int) -> dict:
    """The same loop transaction with and without the line's state tracking."""
    engine = make_engine(url, pool_size=1)
    samples = {"with": [], "without": []}
    real = DBState.track_line
    try:
        with engine.connect() as conn:
            job = conn.execute(text("SELECT id FROM job ORDER BY id LIMIT 1")).scalar()
            seq = conn.execute(text("SELECT COALESCE(max(seq), 0) FROM event_log")).scalar()
            conn.commit()
            for i in range(transactions * 2):
                kind = "with" if i % 2 == 0 else "without"
                DBState.track_line = real if kind == "with" else (lambda self: None)
                t0 = time.perf_counter()
                with conn.begin():
                    db = DBState(conn)
                    db.patch_job_context(job, {"bench": i})
                    db.close_transaction(None, status="HANDLED", first_seq=seq + 1, tx_id=seq + 1)
                samples[kind].append((time.perf_counter() - t0) * 1000)
                seq += len(db.events)
    finally:
        DBState.track_line = real
        engine.dispose()
    return {k: percentiles(v[50:]) for k, v in samples.items()}  # the first ones warm the plans


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=8)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--requests", type=int, default=20)
    ap.add_argument("--transactions", type=int, default=2000)
    args = ap.parse_args(argv)
    dbs = TestDatabases()
    url = dbs.fresh()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            plant_file = write_plant(Path(tmp), args.lines)
            engine = make_engine(url, pool_size=1)
            t0 = time.perf_counter()
            with engine.begin() as conn:
                placed = register_lines(conn, [f"line-{n}" for n in range(1, args.lines + 1)], default="line-1")
                conn.execute(text("SET LOCAL synchronous_commit = off"))
                for n in range(1, args.lines + 1):
                    seed_line(conn, placed[f"line-{n}"].schema, n, args.days)
            with engine.connect() as conn:
                conn.execute(text("ANALYZE"))
                conn.commit()
            engine.dispose()
            print(f"seeded {args.lines} lines x {args.days} days in {time.perf_counter() - t0:.0f} s "
                  f"({args.days * 1440} pieces and {args.days * 120} state stretches per line)")
            p50, p99, items = time_plant_oee(url, plant_file, args.days, args.requests)
            print(f"GET /api/plant/oee?by=shift, {args.days} days, {args.lines} lines ({items} items): "
                  f"p50 {p50:.0f} ms, p99 {p99:.0f} ms ({args.requests} requests)")
        tracked = time_tracking(url, args.transactions)
        (w50, w99), (o50, o99) = tracked["with"], tracked["without"]
        print(f"loop transaction with state tracking: p50 {w50:.3f} ms, p99 {w99:.3f} ms; without: "
              f"p50 {o50:.3f} ms, p99 {o99:.3f} ms; the tracking adds {w50 - o50:.3f} ms at p50")
    finally:
        dbs.drop(url)
        dbs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
