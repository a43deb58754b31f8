"""Several lines on one PostgreSQL: each line's pace against one line alone, the
loop's latency, and what PostgreSQL spends per piece (issue 38).

    .venv/bin/python tests/bench/bench_plant.py [--lines 1,2,4,8] [--pieces 16] [--speed 50]
        [--idle-seconds 30] [--settle-seconds 12] [--transport pgsql|amqp|pgsql,amqp]
    .venv/bin/python tests/bench/bench_plant.py --real-pace [--lines 1,8,32] [--minutes 2]
        [--transport pgsql,amqp]

``--real-pace`` (issue 55): every line at a real cell's pace, one piece a
minute, instead of flat out; plant_pace.py says what it adds. With two
transports each plant size runs on each in turn, the last the reference of the
ratios printed side by side.

One embedded PostgreSQL (fsync on, ``track_commit_timestamp`` on); for each plant
size in ``--lines``, in turn, a fresh database on it and a plant of that many
lines (copies of deploy/lines/cell-a.yaml, ids cell-1 … cell-N, registered with
``shared.db.lines.register_lines``: cell-1 in ``public``, the others each in a
schema of their own). Every line runs as ``linectl up`` runs it: its
line_controller and hardware service as OS processes of their own (``python -m
services.stack.run_service … --line ID``; transport ``pgsql://`` on the same
database, or RabbitMQ with ``--transport amqp``) and its own simulator
(``linectl sim``, the same speed and seed for every line). The lines start
``--start-batch`` at a time, each batch ready before the next (start-up is not
measured). Every line gets one order of ``--pieces`` BRACKET-A; all start
together (or spread over ``--spread-seconds``), and each line's time runs from
its StartOrder to its order COMPLETED with no task running; at the end every
order must be exact (tests/ops/invariants.py), or the bench exits 1. Speed 50: one
line alone is already at its software pace there (about 25–30 pieces/min; 100
is no faster), so a higher speed only adds CPU; 16 pieces: 8 lines finish in a
few minutes on 2 cores, and a line gives some 250 loop messages for the p99.

Per plant size:

* pieces/min of each line (mean and slowest), and the mean against one line alone
  (the first size in ``--lines``);
* loop latency, every loop message of the run, all lines pooled: its
  ``created_at`` (made in the line_controller as it is enqueued) to the commit
  of the transaction that recorded it, ``pg_xact_commit_timestamp(xmin)``
  (``handled_at`` is ``now()``, that transaction's *start*; status()'s
  histogram times the handling alone).
* CPU per piece: PostgreSQL's (the postmaster and its children, ``psutil``; an
  ended backend's is in the postmaster's children times), the lines' services'
  and simulators'; the machine's busy share during the run, ours and others';
* commits (``pg_stat_database.xact_commit`` of the bench database, read-only ones
  included), write transactions (transaction ids assigned) and WAL flushes to
  disk (``pg_stat_io``'s WAL fsyncs: commits that waited for one share it) per piece.

Before the orders start, the lines idle for ``--idle-seconds`` (orders created,
nothing running): what a line costs PostgreSQL per second with nothing to do
(scheduling ticks, the transport's fallback polls and sweeps). The statistics
counters lag up to 10 s behind idle backends, so commits are read
``--settle-seconds`` after the run and the settle's idle commits taken off.
The last lines print what one line would cost at a real cell's pace (one piece
a minute) and how many such lines one PostgreSQL core carries (plant_report.py;
docs/operations.md, "How many lines one PostgreSQL carries").
"""

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import logging  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from pathlib import Path  # noqa: E402

import psutil  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from nameko.standalone.rpc import ClusterRpcProxy  # noqa: E402
from sqlalchemy import text  # noqa: E402

from services.stack.migrate import upgrade  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.db.lines import quote, register_lines  # noqa: E402
from tests.bench.bench_event_loop import ceiling  # noqa: E402
from tests.bench.bench_flow import transport  # noqa: E402
from tests.bench.plant_pace import (  # noqa: E402
    exact_text,
    exactness,
    memory,
    memory_report,
    pace_summary,
    pace_table,
    real_pace_speed,
    too_large,
)
from tests.bench.plant_procs import (  # noqa: E402
    TEMPLATE,
    Line,
    command,
    show_logs,
    start_lines,
    stop_processes,
    write_plant,
)
from tests.bench.plant_report import PRODUCT, report, summary  # noqa: E402


def fresh_database(base_url: str, name: str, statements: bool = False) -> str:
    engine = make_engine(base_url, pool_size=1)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    url = base_url.rsplit("/", 1)[0] + f"/{name}"
    upgrade(url)
    if statements:
        engine = make_engine(url, pool_size=1)
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS pg_stat_statements"))
        engine.dispose()
    return url


# --statements: what ran in a window, from pg_stat_statements (every statement of a
# multi-statement string counted on its own; BEGIN/COMMIT too). The bench's own
# (its counters and progress reads) are left out.
STATEMENTS_SQL = r"""
SELECT calls, total_exec_time, regexp_replace(left(query, 150), '\s+', ' ', 'g') AS query
FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
WHERE d.datname = :d AND query !~ 'pg_stat_database|pg_stat_statements|pg_snapshot_xmax|UNION ALL SELECT 1 AS i'
  AND query !~* '^(SHOW|SELECT sum\(fsyncs|SELECT wal_sync)'
ORDER BY calls DESC, total_exec_time DESC
"""


def statements(engine, database: str, reset: bool = True) -> list:
    with engine.connect() as conn:
        rows = conn.execute(text(STATEMENTS_SQL), {"d": database}).all()
        if reset:
            conn.execute(text("SELECT pg_stat_statements_reset()"))
            conn.commit()
    return rows


def print_statements(title: str, rows: list, per: float, unit: str, top: int = 40) -> None:
    print(f"\n{title}: calls and exec ms per {unit} (pg_stat_statements)")
    for row in rows[:top]:
        print(f"  {row.calls / per:9.2f} {row.total_exec_time / per:8.3f}  {row.query}")


# WAL flushes to disk: pg_stat_io from PostgreSQL 18 on (the embedded server's), pg_stat_wal before.
WAL_SYNCS = {True: "SELECT sum(fsyncs)::bigint FROM pg_stat_io WHERE object = 'wal'",
             False: "SELECT wal_sync FROM pg_stat_wal"}


class Meter:
    """PostgreSQL's CPU seconds, the services', the machine's busy seconds, the bench
    database's commits and the cluster's transaction ids, at one moment."""

    def __init__(self, server: EmbeddedPostgres, engine, database: str, procs: list):
        pid = int((server.pgdata / "postmaster.pid").read_text().split()[0])
        self.postmaster = psutil.Process(pid)
        self.engine, self.database = engine, database
        self.procs = [(label.endswith(" sim"), psutil.Process(p.pid)) for label, p in procs]
        self.bench = psutil.Process()

    def pg_cpu(self) -> float:
        t = self.postmaster.cpu_times()
        total = t.user + t.system + t.children_user + t.children_system
        for child in self.postmaster.children():
            try:
                c = child.cpu_times()
                total += c.user + c.system
            except psutil.NoSuchProcess:
                pass  # it ended: its time is in the postmaster's children times by now
        return total

    def counters(self) -> dict:
        with self.engine.connect() as conn:
            commits = conn.execute(text("SELECT xact_commit FROM pg_stat_database WHERE datname = :d"),
                                   {"d": self.database}).scalar()
            xids = conn.execute(text("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint")).scalar()
            version = int(conn.execute(text("SHOW server_version_num")).scalar())
            syncs = conn.execute(text(WAL_SYNCS[version >= 180000])).scalar()
        return {"commits": commits, "xids": xids, "syncs": syncs}

    def cpu(self) -> dict:
        machine = psutil.cpu_times()
        own = [(sim, sum(p.cpu_times()[:2])) for sim, p in self.procs]
        return {"pg": self.pg_cpu(),
                "services": sum(t for sim, t in own if not sim), "sims": sum(t for sim, t in own if sim),
                "bench": sum(self.bench.cpu_times()[:2]),
                "busy": sum(machine[:3]) + sum(getattr(machine, k, 0.0) for k in ("irq", "softirq", "steal")),
                "wall": time.monotonic()}

    def sample(self) -> dict:
        return {**self.cpu(), **self.counters()}


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


def progress_sql(lines: list[Line]) -> str:
    return " UNION ALL ".join(
        f"SELECT {i} AS i, (SELECT status FROM {quote(line.schema)}.work_order WHERE id = {int(line.order_id)}) "
        f"AS status, (SELECT count(*) FROM {quote(line.schema)}.task WHERE status = 'RUNNING') AS running"
        for i, line in enumerate(lines))


def run_orders(rpc, engine, lines: list[Line], args, procs: list) -> None:
    """Start every line's order (queued, not waited for), line i ``i × spread / N``
    seconds after the first, then note when each is done."""
    timeout = args.spread_seconds + 120 + args.pieces * 3000 / args.speed * len(lines)
    sql = text(progress_sql(lines))
    first = time.perf_counter()
    deadline = time.monotonic() + timeout
    # One connection for every look: each checkout's pre-ping is an autocommit
    # SELECT 1, a commit (it was 18 of a piece's counted commits, the bench's own).
    with engine.connect() as conn:
        while any(line.ended is None for line in lines):
            for i, line in enumerate(lines):
                if line.started is None and time.perf_counter() - first >= i * args.spread_seconds / len(lines):
                    line.started_at, line.started = datetime.now(UTC), time.perf_counter()
                    command(rpc, line, "StartOrder", {"workOrderId": line.order_id}, 0)
            rows = conn.execute(sql).all()
            conn.rollback()  # read-only: no commit counted
            now = time.perf_counter()
            for row in rows:
                line = lines[row.i]
                if line.started is not None and line.ended is None and row.status == "COMPLETED" and row.running == 0:
                    line.ended = now
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out: {[line.id for line in lines if line.ended is None]} not done")
            if any(proc.poll() is not None for _, proc in procs):
                raise SystemExit("a service exited during the run (logs in the temp dir)")
            eventlet.sleep(0.1)


def loop_figures(engine, lines: list[Line]) -> tuple[list[float], int]:
    """Seconds from each loop message's creation to its transaction's commit, and
    the loop's own transactions (messages recorded, scheduling rounds), of the run."""
    values, transactions = [], 0
    with engine.connect() as conn:
        for line in lines:
            schema, t = quote(line.schema), {"t": line.started_at}
            values += conn.execute(text(
                f"SELECT EXTRACT(EPOCH FROM pg_xact_commit_timestamp(xmin) - created_at)::float8 "
                f"FROM {schema}.loop_message WHERE created_at >= :t AND status <> 'QUEUED'"), t).scalars().all()
            transactions += conn.execute(text(
                f"SELECT (SELECT count(*) FROM {schema}.loop_message WHERE created_at >= :t) + "
                f"(SELECT count(DISTINCT tx_id) FROM {schema}.event_log WHERE at >= :t AND message_id IS NULL)"),
                t).scalar()
    return sorted(v for v in values if v is not None), transactions


def measure(server, url: str, amqp: str, plant_file: Path, lines: list[Line], procs: list, args) -> dict:
    """The lines started, the idle window, then the orders, with the meters around both."""
    database = url.rsplit("/", 1)[1]
    engine = make_engine(url, pool_size=2)
    config = {"AMQP_URI": amqp, "serializer": "json"}
    try:
        with ClusterRpcProxy(config, timeout=30) as rpc:
            began = time.monotonic()
            start_lines(rpc, url, amqp, plant_file, lines, procs, args)
            print(f"   {len(lines)} line(s) up in {time.monotonic() - began:.0f} s (not measured)", flush=True)
            for line in lines:
                order = command(rpc, line, "CreateOrder", {"productId": PRODUCT, "quantity": args.pieces,
                                                           "code": f"BENCH-{line.id}"}, 30)
                line.order_id = order["result"]["id"]
            meter = Meter(server, engine, database, procs)
            used = memory({line.id: line.pids for line in lines}, meter.postmaster)
            eventlet.sleep(args.settle_seconds)  # the start-up's statistics flushed
            if args.statements:
                statements(engine, database)
            idle_start = meter.sample()
            eventlet.sleep(args.idle_seconds)
            before = meter.sample()
            idle = delta(before, idle_start)
            if args.statements:
                print_statements("idle", statements(engine, database), idle["wall"] * len(lines), "line-second")
            run_orders(rpc, engine, lines, args, procs)
            run_cpu = delta(meter.cpu(), before)
            eventlet.sleep(args.settle_seconds)
            counted = delta(meter.counters(), before)
            if args.statements:
                print_statements("run (with the settle's idle)", statements(engine, database, reset=False),
                                 args.pieces * len(lines), "piece")
        per_second = {k: idle[k] / idle["wall"] for k in ("pg", "services", "sims", "commits", "xids", "syncs")}
        run = {**run_cpu, **{k: counted[k] - per_second[k] * args.settle_seconds
                             for k in ("commits", "xids", "syncs")}}
        latency, loop_tx = loop_figures(engine, lines)
        return {"idle": per_second, "run": run, "latency": latency, "loop_tx": loop_tx, "memory": used,
                "busy_seconds": sum(line.ended - line.started for line in lines),
                "exact": exactness(url, lines, engine)}
    finally:
        engine.dispose()


def run_plant(server, base_url: str, count: int, kind: str, args, tmp: Path) -> dict:
    plant_file, lines = write_plant(tmp / f"plant-{count}-{kind}", count)
    url = fresh_database(base_url, f"plant_{count}_{kind}", args.statements)
    engine = make_engine(url, pool_size=1)
    with engine.begin() as conn:
        placed = register_lines(conn, [line.id for line in lines], default=lines[0].id)
    engine.dispose()
    for line in lines:
        line.schema = placed[line.id].schema
    amqp, cleanup = transport(url, kind)
    procs = []
    try:
        figures = measure(server, url, amqp, plant_file, lines, procs, args)
    except BaseException:
        show_logs(plant_file.parent)
        raise
    finally:
        stop_processes(procs)
        cleanup()
    paces = [args.pieces * 60 / (line.ended - line.started) for line in lines]
    return {"lines": count, "transport": kind, "paces": paces, **figures}


def commit_ceiling(base_url: str) -> float:
    url = fresh_database(base_url, "plant_ceiling")
    return ceiling(url, 3.0)


def parse(argv) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--real-pace", action="store_true",
                    help="every line at one piece a minute (the simulator's speed set so), orders of --minutes pieces, "
                         "their starts spread over --spread-seconds; sizes 1,8,32 unless --lines")
    ap.add_argument("--minutes", type=int, default=2,
                    help="real pace: each line's order, in pieces (about a minute each; default 2)")
    ap.add_argument("--lines", help="plant sizes, in turn (the first is the reference; default 1,2,4,8)")
    ap.add_argument("--pieces", type=int, help="pieces in every line's order (default 16)")
    ap.add_argument("--speed", type=float, help="every simulator's speed (default 50)")
    ap.add_argument("--spread-seconds", type=float,
                    help="the orders' starts spread evenly over this (default 0; real pace 30)")
    ap.add_argument("--idle-seconds", type=float, default=30.0)
    ap.add_argument("--settle-seconds", type=float, default=12.0)
    ap.add_argument("--start-batch", type=int, default=4, help="lines started at once (start-up is not measured)")
    ap.add_argument("--transport", default="pgsql",
                    help="pgsql, amqp or both (pgsql,amqp: each size on each in turn, the last the reference); "
                         "amqp: RabbitMQ on 127.0.0.1:5672 (a private vhost) or LINECTL_BENCH_AMQP_URI")
    ap.add_argument("--statements", action="store_true",
                    help="also list the statements PostgreSQL ran, idle and per piece (pg_stat_statements)")
    args = ap.parse_args(argv)
    args.transports = [t for t in args.transport.split(",") if t]
    if not args.transports or set(args.transports) - {"pgsql", "amqp"}:
        ap.error(f"--transport: pgsql, amqp or pgsql,amqp, not {args.transport!r}")
    pace = args.real_pace
    args.lines = args.lines or ("1,8,32" if pace else "1,2,4,8")
    args.pieces = args.pieces or (args.minutes if pace else 16)
    args.speed = args.speed or (real_pace_speed(TEMPLATE, PRODUCT) if pace else 50.0)
    args.spread_seconds = (30.0 if pace else 0.0) if args.spread_seconds is None else args.spread_seconds
    return args


def measure_sizes(server, base: str, sizes: list[int], args, tmp: Path) -> dict[str, list[dict]]:
    """Every plant size on every transport, in turn: {transport: [figures per size]}."""
    results = {kind: [] for kind in args.transports}
    for count in sizes:
        for kind in args.transports:
            print(f"== {count} line(s), {kind}", flush=True)
            crowded = too_large([r for rs in results.values() for r in rs], count)
            if crowded:
                print(f"{count} line(s) on {kind} not measured: {crowded}", flush=True)
                continue
            began = time.monotonic()
            try:
                r = run_plant(server, base, count, kind, args, tmp)
            except SystemExit as exc:  # the other sizes still count
                print(f"{count} line(s) on {kind} not measured: {exc}", flush=True)
                continue
            results[kind].append(r)
            print(summary(r, args.pieces), exact_text(r, args.pieces), sep="\n", flush=True)
            if args.real_pace:
                print(pace_summary(r), flush=True)
            print(f"   {time.monotonic() - began:.0f} s with start-up and stop", flush=True)
    return results


def main(argv=None) -> int:
    args = parse(argv)
    sizes = [int(n) for n in args.lines.split(",") if n]
    began = time.monotonic()
    # py-amqp warns of every late frame when the bench's RPC client closes (--transport amqp).
    logging.getLogger("amqp").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory(prefix="linectl-bench-plant-") as tmp:
        # Each line's processes hold about 12 connections on pgsql:// (8 lines, 102 backends).
        server = EmbeddedPostgres(Path(tmp) / "pg", max_connections=max(300, 16 * max(sizes) + 50))
        base = server.start()
        try:
            engine = make_engine(base, pool_size=1)
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("ALTER SYSTEM SET track_commit_timestamp = on"))
                if args.statements:
                    conn.execute(text("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'"))
            engine.dispose()
            server.restart()  # track_commit_timestamp takes a restart
            ceil = commit_ceiling(base)
            results = measure_sizes(server, base, sizes, args, Path(tmp))
        finally:
            server.stop()
    for rs in results.values():
        if rs:
            report(rs, args, ceil)
    measured = [r for rs in results.values() for r in rs]
    if not measured:
        return 1
    if args.real_pace or len(args.transports) > 1:
        pace_table(results, "real pace" if args.real_pace else f"flat out (speed {args.speed:g})")
    memory_report(results)
    inexact = [f"{r['lines']} line(s) on {r['transport']}" for r in measured if r["exact"]["broken"]]
    print(f"\nevery order exact: {'NO, not on ' + ', '.join(inexact) if inexact else 'yes'}; "
          f"{len(measured)} of {len(sizes) * len(args.transports)} runs measured; "
          f"{(time.monotonic() - began) / 60:.1f} min in all")
    return 0 if len(measured) == len(sizes) * len(args.transports) and not inexact else 1


if __name__ == "__main__":
    sys.exit(main())
