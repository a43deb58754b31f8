"""Production figures on a long history (a plain script: ``make bench``).

Issue 18's bound: ``GET /api/stats`` p95 < 200 ms over 1 million event-log
rows. The script writes a synthetic history of two days ending now: the four
machines of deploy/line.yaml cycling (PROCESSING → WAITING_UNLOAD → IDLE, a
FAULT now and then), with the rows the loop writes for it: event_log (1M rows
by default), machine_state_interval, machine_cycle and finished jobs. Then it
times, in the same run:

- ``GET /api/stats`` (the default 8 hours, and a 2-day window) and
  ``GET /api/stats/timeline`` through the gateway's Flask app, read from the
  loop's rollup by index;
- the reference: the same per-machine state seconds computed from the event
  log alone (a window function over its ``MachineStateChanged`` rows), which
  is what the figures cost without the rollup;

and prints p50/p95 and the ratios. PostgreSQL is embedded unless
LINECTL_TEST_DATABASE_URL is set. ``BENCH_STATS_EVENTS`` sets the event rows.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from gateway.app import create_app  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.layout import load_layout  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402

EVENTS = int(os.environ.get("BENCH_STATS_EVENTS", "1000000"))
HISTORY_HOURS = 48
TOKEN = "operator-token-bench-0001"
BOUND_MS = 200.0
REQUESTS = 60


def seed_machine_history(conn, params: dict) -> None:
    """One machine's jobs, cycles and state intervals over the history (params: the
    machine m, its n cycles p seconds apart, the first job id base, h hours)."""
    conn.execute(text(
        "INSERT INTO job (id, work_order_id, seq_no, status, position_type, step_index, finished_at) "
        "SELECT :base + k, 1, :base + k, CASE WHEN k % 7 = 0 THEN 'SCRAPPED' ELSE 'COMPLETED' END, "
        "'OUT', 2, now() - make_interval(hours => :h) + make_interval(secs => (k + 0.9) * :p) "
        "FROM generate_series(1, :n) AS k"), params)
    conn.execute(text(
        "INSERT INTO machine_cycle (equipment_id, job_ids, requested_at, started_at, ended_at, "
        "  good_pieces, scrapped_pieces) "
        "SELECT :m, ARRAY[:base + k]::bigint[], t, t, t + make_interval(secs => 0.6 * :p), "
        "  CASE WHEN k % 7 = 0 THEN 0 ELSE 1 END, CASE WHEN k % 7 = 0 THEN 1 ELSE 0 END "
        "FROM (SELECT k, now() - make_interval(hours => :h) + make_interval(secs => k * :p) AS t "
        "      FROM generate_series(1, :n) AS k) c"), params)
    conn.execute(text(
        "INSERT INTO machine_state_interval (equipment_id, state, started_at, ended_at) "
        "SELECT :m, s.state, t + make_interval(secs => s.off * :p), "
        "  CASE WHEN k = :n AND s.state = 'IDLE' THEN NULL "
        "  ELSE t + make_interval(secs => s.till * :p) END "
        "FROM (SELECT k, now() - make_interval(hours => :h) + make_interval(secs => k * :p) AS t "
        "      FROM generate_series(1, :n) AS k) c "
        "CROSS JOIN LATERAL (VALUES ('PROCESSING', 0.0, 0.6), ('WAITING_UNLOAD', 0.6, 0.7), "
        "  (CASE WHEN k % 50 = 0 THEN 'FAULT' ELSE 'IDLE' END, 0.7, 1.0)) AS s(state, off, till)"),
        params)


def seed_event_log(conn) -> None:
    """The event log: per cycle, its three MachineStateChanged events and the
    job, slot, task and equipment events around them (payloads of realistic size)."""
    conn.execute(text(
        "INSERT INTO event_log (seq, tx_id, type, at, payload) "
        "SELECT i, i / 4, "
        "  CASE WHEN i % 10 = 0 THEN 'MachineStateChanged' WHEN i % 3 = 0 THEN 'SlotChanged' "
        "       WHEN i % 3 = 1 THEN 'JobMoved' ELSE 'TaskSucceeded' END, "
        "  now() - make_interval(hours => :h) + make_interval(secs => i * :step), "
        "  CASE WHEN i % 10 = 0 THEN jsonb_build_object("
        "    'equipmentId', (ARRAY['MC1','MC2','WASH1','INSP1'])[1 + (i / 10) % 4], "
        "    'state', (ARRAY['PROCESSING','WAITING_UNLOAD','IDLE'])[1 + (i / 40) % 3]) "
        "  ELSE jsonb_build_object('id', i, 'workOrderId', 1, 'status', 'QUEUED', "
        "    'positionType', 'ON_BUFFER', 'positionRefId', '3', 'tempSlotNo', 3, 'stepIndex', 1, "
        "    'equipmentId', 'MC1', 'slotNo', 1) END "
        "FROM generate_series(1, :e) AS i"),
        {"h": HISTORY_HOURS, "step": HISTORY_HOURS * 3600 / EVENTS, "e": EVENTS})


def seed(engine, layout) -> dict:
    """Cycles for each machine over the history, with their intervals, jobs and
    event rows. Each cycle is one piece: ~EVENTS / cycles event rows apiece."""
    machines = [e.id for e in layout.equipment]
    events_per_cycle = 30
    cycles_per_machine = max(1, EVENTS // events_per_cycle // len(machines))
    period = HISTORY_HOURS * 3600 / cycles_per_machine  # seconds between cycle starts
    with engine.begin() as conn:
        conn.execute(text("SET LOCAL synchronous_commit = off"))
        for e in layout.equipment:
            conn.execute(text("INSERT INTO equipment (id, name, kind, batch, slot_count) "
                              "VALUES (:id, :id, :k, :b, :s) ON CONFLICT DO NOTHING"),
                         {"id": e.id, "k": e.kind, "b": e.batch, "s": e.slots})
        conn.execute(text(
            "INSERT INTO work_order (id, code, product_id, route, quantity, status) "
            "VALUES (1, 'WO-BENCH', 'SHAFT-B', '[]', :q, 'RUNNING')"), {"q": 10000})  # the jobs below are its history
        for m, machine in enumerate(machines):
            # cycle k: PROCESSING for 60 % of the period, WAITING_UNLOAD 10 %, IDLE the rest;
            # every 50th cycle's idle time is a FAULT instead.
            params = {"m": machine, "n": cycles_per_machine, "p": period, "h": HISTORY_HOURS,
                      "base": m * cycles_per_machine}
            seed_machine_history(conn, params)
        seed_event_log(conn)
        conn.execute(text("SELECT setval(pg_get_serial_sequence('job', 'id'), (SELECT max(id) FROM job))"))
    with engine.connect() as conn:
        conn.execute(text("ANALYZE"))
        counts = {t: conn.execute(text(f"SELECT count(*) FROM {t}")).scalar()
                  for t in ("event_log", "machine_state_interval", "machine_cycle", "job")}
    return counts


# The reference: state seconds per machine from the event log alone.
REFERENCE_SQL = """
WITH s AS (
  SELECT payload->>'equipmentId' AS e, payload->>'state' AS state, at,
         lead(at) OVER (PARTITION BY payload->>'equipmentId' ORDER BY seq) AS till
  FROM event_log WHERE type = 'MachineStateChanged'
)
SELECT e, state, sum(extract(epoch FROM LEAST(COALESCE(till, now()), now())
                             - GREATEST(at, now() - make_interval(hours => :w))))
FROM s WHERE COALESCE(till, now()) > now() - make_interval(hours => :w)
GROUP BY e, state
"""


def timed(fn, n=REQUESTS) -> list[float]:
    fn()  # warm
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main() -> None:
    dbs = TestDatabases()
    url = dbs.fresh()
    try:
        layout = load_layout(load_settings({}).line_file)
        engine = make_engine(url, pool_size=2)
        t = time.perf_counter()
        counts = seed(engine, layout)
        print(f"history: {counts} in {time.perf_counter() - t:.1f} s")
        app = create_app(load_settings({"LINECTL_DATABASE_URL": url,
                                        "LINECTL_TOKENS": f"operator:{TOKEN}"}))
        client = app.test_client()
        auth = {"Authorization": f"Bearer {TOKEN}"}

        def get(path):
            r = client.get(path, headers=auth)
            assert r.status_code == 200, (path, r.status_code, r.get_data(as_text=True)[:300])
            return r

        def reference(hours):
            with engine.connect() as conn:
                conn.execute(text(REFERENCE_SQL), {"w": hours}).all()

        rows = []
        for label, fn in [
            ("GET /api/stats (8 h)", lambda: get("/api/stats")),
            ("reference: event log (8 h)", lambda: reference(8)),
            ("GET /api/stats (48 h)", lambda: get("/api/stats?from=" + _ago(48))),
            ("reference: event log (48 h)", lambda: reference(48)),
            ("GET /api/stats/timeline (8 h, MC1)", lambda: get("/api/stats/timeline?equipmentId=MC1")),
        ]:
            ms = timed(fn)
            rows.append((label, statistics.median(ms), pct(ms, 95)))
        print(f"\n{'':40} {'p50 ms':>9} {'p95 ms':>9}")
        for label, p50, p95 in rows:
            print(f"{label:40} {p50:9.2f} {p95:9.2f}")
        print(f"\nGET /api/stats p95, 8 h: {rows[0][2]:.1f} ms (bound {BOUND_MS:.0f} ms: "
              f"{'met' if rows[0][2] < BOUND_MS else 'MISSED'}); 48 h: {rows[2][2]:.1f} ms "
              f"({'met' if rows[2][2] < BOUND_MS else 'MISSED'})")
        print(f"reference ÷ rollup, p95: 8 h {rows[1][2] / rows[0][2]:.1f}×, "
              f"48 h {rows[3][2] / rows[2][2]:.1f}×")
        engine.dispose()
    finally:
        dbs.drop(url)
        dbs.close()


def _ago(hours: int) -> str:
    from datetime import UTC, datetime, timedelta
    return (datetime.now(UTC) - timedelta(hours=hours) + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


if __name__ == "__main__":
    main()
