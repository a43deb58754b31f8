"""AI job queue throughput (a plain script: ``make bench``).

Full job cycles per second (poll → lock → heartbeat → result with the offline
provider's output) over HTTP through the gateway, the RPC pool and the
line_controller's AI entrypoints, with 1, 10 and 50 runtimes (green threads,
one HTTP client each); lock latency p50/p99 as the runtimes see it. As
deployed, the service and the gateway are processes of their own (this script
re-run as ``serve`` / ``gateway``); the runtimes run here. In the
same run, the reference: the same conditional-UPDATE lock done directly with
psycopg2 (no HTTP, no RPC), its rate and the ratio. Then poll p50/p99 with
100k pending jobs, both as SQL and over HTTP.

Needs RabbitMQ on 127.0.0.1:5672 (or LINECTL_AMQP_URI) until the pgsql://
transport lands; PostgreSQL is embedded unless LINECTL_TEST_DATABASE_URL is set.
"""

from __future__ import annotations

import warnings

warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")

import eventlet  # noqa: E402

eventlet.monkey_patch()

import importlib.util  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import subprocess  # noqa: E402

import psycopg2  # noqa: E402
from nameko.containers import ServiceContainer  # noqa: E402
from services.ai_jobs.entrypoints import AiJobsEntrypoints  # noqa: E402
from sqlalchemy import text  # noqa: E402
from werkzeug.serving import make_server  # noqa: E402

from gateway.app import create_app  # noqa: E402
from gateway.rpc import RpcPool  # noqa: E402
from services.ai_jobs import repository as repo  # noqa: E402
from services.ai_jobs.domain import QueueTimings  # noqa: E402
from services.ai_runtime.client import ProtocolError, RuntimeClient  # noqa: E402
from services.ai_runtime.providers import OfflineProvider  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.db.engine import make_engine, make_sessionmaker  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402

TOKENS = "platform:platform-token-1,runtime:runtime-token-1"
RUNS = ((1, 150), (10, 600), (50, 1000))  # (runtimes, jobs)
POLL_ROWS = 100_000


class LineControllerAi(AiJobsEntrypoints):
    name = "line_controller"


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] * 1000


def seed(engine, n, job_type="learning_state_analysis"):
    with engine.begin() as c:
        c.execute(text("DELETE FROM ai_job_transition; DELETE FROM ai_runtime_result; DELETE FROM ai_runtime_job"))
        c.execute(text("""
            INSERT INTO ai_runtime_job (id, user_id, job_type, target_type, target_id, priority,
                                        output_schema_version, created_at)
            SELECT gen_random_uuid()::text, 'u' || (g % 97), :t, 'user', 't' || g, g % 10, '1',
                   now() - make_interval(secs => :n - g)
            FROM generate_series(1, :n) AS g"""), {"n": n, "t": job_type})
        c.execute(text("ANALYZE ai_runtime_job"))


def full_cycles(url, runtimes, jobs_total):
    """Runtimes doing the seed protocol over HTTP until the queue is empty."""
    offline = OfflineProvider()
    lock_times, done = [], [0]

    def runtime(i):
        client = RuntimeClient(url, "runtime-token-1", f"bench-{i}", timeout=60)
        idle = 0
        while idle < 2:
            page = client.poll(["learning_state_analysis"], limit=min(50, runtimes * 2))
            if not page:
                idle += 1
                continue
            idle = 0
            random.shuffle(page)
            for job in page:
                t0 = time.perf_counter()
                try:
                    lease = client.lock(job["id"])
                except ProtocolError as exc:
                    if exc.code == "JOB_ALREADY_LOCKED":
                        continue
                    raise
                lock_times.append(time.perf_counter() - t0)
                client.heartbeat(job["id"], lease["attemptNo"])
                output = offline.complete(job, None, None)
                client.succeed(job["id"], lease["attemptNo"], output)
                done[0] += 1
                break

    started = time.perf_counter()
    threads = [threading.Thread(target=runtime, args=(i,)) for i in range(runtimes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    assert done[0] == jobs_total, (done[0], jobs_total)
    return done[0] / elapsed, lock_times


def raw_locks(db_url, engine, runtimes, jobs_total):
    """The same conditional UPDATE straight over psycopg2, one connection per runtime."""
    seed(engine, jobs_total)
    with engine.connect() as c:
        ids = c.execute(text("SELECT id FROM ai_runtime_job")).scalars().all()
    random.shuffle(ids)
    chunks = [ids[i::runtimes] for i in range(runtimes)]
    lock_sql = ("UPDATE ai_runtime_job SET status = 'locked', locked_by = %s, locked_at = now(),"
                " lock_until = now() + interval '60 seconds', attempt_no = attempt_no + 1, updated_at = now()"
                " WHERE id = %s AND status = 'pending' AND (lock_until IS NULL OR lock_until < now())")
    times = []

    def runner(i):
        conn = psycopg2.connect(db_url)
        conn.autocommit = True
        with conn.cursor() as cur:
            for job_id in chunks[i]:
                t0 = time.perf_counter()
                cur.execute(lock_sql, (f"raw-{i}", job_id))
                times.append(time.perf_counter() - t0)
        conn.close()

    started = time.perf_counter()
    threads = [threading.Thread(target=runner, args=(i,)) for i in range(runtimes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(ids) / (time.perf_counter() - started), times


def serve(config_json: str) -> int:
    """Child process: the AI entrypoints in a nameko container until SIGTERM."""
    import json
    import signal

    container = ServiceContainer(LineControllerAi, json.loads(config_json))
    stopping = eventlet.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.ready() or stopping.send(True))
    container.start()
    stopping.wait()
    container.stop()
    return 0


def gateway(config_json: str, db_url: str, port_file: str) -> int:
    """Child process: the gateway (threaded werkzeug, as ``linectl up`` serves it)."""
    import json
    import signal

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    pool = RpcPool(json.loads(config_json), size=60, timeout=60)
    app = create_app(load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": TOKENS}), rpc_pool=pool)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    Path(port_file).write_text(str(server.server_port))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    stopping = eventlet.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.ready() or stopping.send(True))
    stopping.wait()
    server.shutdown()
    pool.close()
    return 0


def wait_until(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError("a bench process did not come up")
        time.sleep(0.1)


def main() -> int:
    import json
    import tempfile

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    amqp = os.environ.get("LINECTL_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/")
    dbs = TestDatabases()
    children = []
    try:
        db_url = dbs.fresh()
        if importlib.util.find_spec("shared.transport.pgsql") and not os.environ.get("LINECTL_AMQP_URI"):
            amqp = "pgsql://" + db_url.split("://", 1)[1]
        config = json.dumps({"AMQP_URI": amqp, "serializer": "json", "LINECTL_DATABASE_URL": db_url,
                             "max_workers": 60, "LINECTL_AI_RETRY_BACKOFF_SECONDS": 0,
                             "LINECTL_DATA_DIR": tempfile.mkdtemp(prefix="linectl-bench-ai-")})
        port_file = Path(tempfile.mkdtemp()) / "port"
        me = [sys.executable, __file__]
        children.append(subprocess.Popen([*me, "serve", config]))
        children.append(subprocess.Popen([*me, "gateway", config, db_url, str(port_file)]))
        wait_until(lambda: port_file.exists() and port_file.read_text())
        url = f"http://127.0.0.1:{port_file.read_text()}"
        probe = RuntimeClient(url, "runtime-token-1", "probe")

        def service_up():
            try:
                probe.poll(["learning_state_analysis"], limit=1)
                return True
            except ProtocolError:
                return False
        wait_until(service_up)
        engine = make_engine(db_url, pool_size=4)

        print(f"transport {amqp.split('://')[0]}://; service, gateway and runtimes in 3 processes")
        print(f"{'runtimes':>8} {'jobs':>5} | {'cycles/s':>9} {'lock p50':>9} {'lock p99':>9} |"
              f" {'raw lock/s':>10} {'raw p50':>8} {'raw p99':>8} | {'HTTP/raw':>8}")
        for runtimes, jobs_total in RUNS:
            seed(engine, jobs_total)
            rate, lock_times = full_cycles(url, runtimes, jobs_total)
            raw_rate, raw_times = raw_locks(db_url, engine, runtimes, jobs_total)
            print(f"{runtimes:>8} {jobs_total:>5} | {rate:>9.1f} {pct(lock_times, 50):>7.1f}ms"
                  f" {pct(lock_times, 99):>7.1f}ms | {raw_rate:>10.0f} {pct(raw_times, 50):>6.2f}ms"
                  f" {pct(raw_times, 99):>6.2f}ms | {rate / raw_rate:>8.3f}")
        print("(cycles/s: poll+lock+heartbeat+result per job over HTTP; raw: the lock UPDATE alone)")

        seed(engine, POLL_ROWS)
        sm = make_sessionmaker(engine)
        timings = QueueTimings()
        sql_times, http_times = [], []
        caps = ["learning_state_analysis", "quiz_generation", "flashcard_generation"]
        for _ in range(200):
            with sm() as s, s.begin():
                t0 = time.perf_counter()
                assert len(repo.poll(s, timings, "poller", caps, 50)) == 50
                sql_times.append(time.perf_counter() - t0)
        for _ in range(100):
            t0 = time.perf_counter()
            assert len(probe.poll(caps, limit=50)) == 50
            http_times.append(time.perf_counter() - t0)
        print(f"poll (limit 50, {POLL_ROWS // 1000}k pending): SQL p50 {pct(sql_times, 50):.2f} ms,"
              f" p99 {pct(sql_times, 99):.2f} ms; HTTP p50 {pct(http_times, 50):.2f} ms,"
              f" p99 {pct(http_times, 99):.2f} ms; mean SQL {statistics.mean(sql_times) * 1000:.2f} ms")
        engine.dispose()
    finally:
        for child in children:
            child.terminate()
        for child in children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
        dbs.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "serve":
        sys.exit(serve(sys.argv[2]))
    if len(sys.argv) > 1 and sys.argv[1] == "gateway":
        sys.exit(gateway(sys.argv[2], sys.argv[3], sys.argv[4]))
    sys.exit(main())
