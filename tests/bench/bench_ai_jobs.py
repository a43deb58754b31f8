"""AI job queue throughput (a plain script: ``make bench``).

Full job cycles per second over HTTP against the real gateway
(``python -m gateway``, its default worker processes), which serves the queue
straight from PostgreSQL: poll → lock → heartbeat → result with the offline
provider's output (the seed protocol), and poll(claim) → heartbeat → result
(``claim: true``), at 1, 10, 50 and 200 runtimes. Runtimes are threads with
one keep-alive HTTP connection each (a lean ``http.client``, see
``LeanClient``), split over client processes so the client is not the bound.
Lock latency p50/p99 as the runtimes see it (with ``claim`` the poll that
locks). In the same run, the reference: the same conditional-UPDATE lock
done directly with psycopg2 (no HTTP), its rate, and the ratio. Then the poll
at 100k pending jobs, as SQL and over HTTP.

PostgreSQL is embedded unless LINECTL_TEST_DATABASE_URL is set.
``BENCH_AI_RUNS=1:150,10:600`` picks the runs; ``BENCH_AI_CLIENTS`` the
client processes (default 2).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg2  # noqa: E402
from sqlalchemy import text  # noqa: E402

from services.ai_jobs import repository as repo  # noqa: E402
from services.ai_jobs.domain import QueueTimings, output_hash  # noqa: E402
from services.ai_runtime.client import ProtocolError, RuntimeClient  # noqa: E402
from services.ai_runtime.providers import OfflineProvider  # noqa: E402
from shared.db.engine import make_engine, make_sessionmaker  # noqa: E402
from tests.support.ai_jobs import insert_pending_jobs  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402

TOKENS = "platform:platform-token-000001,runtime:runtime-token-000001"
RUNTIME_TOKEN = "runtime-token-000001"
DEFAULT_RUNS = ((1, 150), (10, 600), (50, 1000), (200, 2000))  # (runtimes, jobs)
POLL_ROWS = 100_000
JOB_TYPE = "learning_state_analysis"


def pct(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] * 1000


def seed(engine, n, job_type=JOB_TYPE):
    with engine.begin() as c:
        c.execute(text("DELETE FROM ai_job_transition; DELETE FROM ai_runtime_result; DELETE FROM ai_runtime_job"))
        insert_pending_jobs(c, n, job_type)
        c.execute(text("ANALYZE ai_runtime_job"))


# -- the runtimes (in client processes) ---------------------------------------------


class LeanClient:
    """The runtime protocol on one keep-alive ``http.client`` connection. The
    bench's runtimes share the 2 cores with the gateway and PostgreSQL;
    ``requests`` cost ~2.5 ms of CPU per call here, which would measure the
    client. Same requests, same answers as ``RuntimeClient``."""

    def __init__(self, url, token, rid):
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        self.host, self.port, self.rid = parts.hostname, parts.port, rid
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.conn = None

    def _post(self, path, body):
        import http.client

        data = json.dumps(body).encode()
        for attempt in (1, 2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
            try:
                self.conn.request("POST", "/internal/runtime" + path, data, self.headers)
                r = self.conn.getresponse()
                raw = r.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self.conn.close()
                self.conn = None
                if attempt == 2:
                    raise
        answer = json.loads(raw) if raw else None
        if r.status >= 400:
            raise ProtocolError(r.status, answer["error"]["code"], answer["error"]["message"])
        return answer

    def poll(self, caps, limit=20, claim=False):
        return self._post("/jobs/poll", {"runtimeInstanceId": self.rid, "capabilities": caps,
                                         "limit": limit, "claim": claim})["jobs"]

    def lock(self, job_id):
        return self._post(f"/jobs/{job_id}/lock", {"runtimeInstanceId": self.rid})

    def heartbeat(self, job_id, attempt):
        self._post(f"/jobs/{job_id}/heartbeat", {"runtimeInstanceId": self.rid, "attemptNo": attempt})

    def succeed(self, job_id, attempt, output):
        return self._post(f"/jobs/{job_id}/result", {
            "runtimeInstanceId": self.rid, "attemptNo": attempt, "status": "succeeded",
            "output": output, "outputHash": output_hash(output)})


def runtime_loop(url, rid, claim, page_size, lock_times, done, go):
    offline = OfflineProvider()
    client = LeanClient(url, RUNTIME_TOKEN, rid)
    go.wait()
    idle = 0
    while idle < 3:
        if claim:
            t0 = time.perf_counter()
            page = client.poll([JOB_TYPE], limit=1, claim=True)
            if page:
                lock_times.append(time.perf_counter() - t0)
        else:
            page = client.poll([JOB_TYPE], limit=page_size)
            random.shuffle(page)
        if not page:
            idle += 1
            time.sleep(0.02)
            continue
        idle = 0
        for job in page:
            if not claim:
                t0 = time.perf_counter()
                try:
                    lease = client.lock(job["id"])
                except ProtocolError as exc:
                    if exc.code == "JOB_ALREADY_LOCKED":
                        continue
                    raise
                lock_times.append(time.perf_counter() - t0)
                job = {**job, "attemptNo": lease["attemptNo"]}
            client.heartbeat(job["id"], job["attemptNo"])
            client.succeed(job["id"], job["attemptNo"], offline.complete(job, None, None))
            done.append(1)
            break


def client_process(url, ids, claim, page_size, start_at, out_q):
    lock_times, done = [], []
    go = threading.Event()
    threads = [threading.Thread(target=runtime_loop, args=(url, f"bench-{i}", claim, page_size,
                                                          lock_times, done, go)) for i in ids]
    for t in threads:
        t.start()
    time.sleep(max(start_at - time.time(), 0))
    go.set()
    for t in threads:
        t.join()
    out_q.put((len(done), lock_times, time.time()))


def full_cycles(url, runtimes, claim, clients):
    ctx = mp.get_context("fork")
    out_q = ctx.Queue()
    start_at = time.time() + 1.0 + runtimes / 200
    page_size = min(50, max(runtimes * 2, 5))
    procs = [ctx.Process(target=client_process,
                         args=(url, list(range(runtimes))[k::clients], claim, page_size, start_at, out_q))
             for k in range(min(clients, runtimes))]
    for p in procs:
        p.start()
    results = [out_q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    done = sum(r[0] for r in results)
    lock_times = [t for r in results for t in r[1]]
    # The idle tail (3 empty polls) is not work: end at the last finished cycle.
    elapsed = max(r[2] for r in results) - start_at - 0.06
    return done, done / elapsed, lock_times


# -- the reference ---------------------------------------------------------------------


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
    conns = [psycopg2.connect(db_url) for _ in range(runtimes)]

    def runner(i):
        conn = conns[i]
        conn.autocommit = True
        with conn.cursor() as cur:
            for job_id in chunks[i]:
                t0 = time.perf_counter()
                cur.execute(lock_sql, (f"raw-{i}", job_id))
                times.append(time.perf_counter() - t0)

    started = time.perf_counter()
    threads = [threading.Thread(target=runner, args=(i,)) for i in range(runtimes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = len(ids) / (time.perf_counter() - started)
    for c in conns:
        c.close()
    return rate, times


# -- the gateway -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gateway(db_url, data_dir):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINECTL_")}
    env.update({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": TOKENS, "LINECTL_HTTP_PORT": str(port),
                "LINECTL_DATA_DIR": data_dir, "LINECTL_AI_RETRY_BACKOFF_SECONDS": "0",
                "LINECTL_LOG_LEVEL": "WARNING",
                **{k: v for k, v in os.environ.items() if k.startswith("LINECTL_GATEWAY_")}})
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--name", "bench-gateway"], env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    probe = RuntimeClient(url, RUNTIME_TOKEN, "probe", timeout=5)
    deadline = time.monotonic() + 60
    while True:
        try:
            probe.poll([JOB_TYPE], limit=1)
            return proc, url, probe
        except ProtocolError:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the gateway did not come up") from None
            time.sleep(0.2)


def parse_runs():
    raw = os.environ.get("BENCH_AI_RUNS")
    if not raw:
        return DEFAULT_RUNS
    return tuple(tuple(int(x) for x in item.split(":")) for item in raw.split(","))


def main() -> int:
    clients = int(os.environ.get("BENCH_AI_CLIENTS", "2"))
    dbs = TestDatabases()
    gateway = None
    try:
        db_url = dbs.fresh()
        gateway, url, probe = start_gateway(db_url, tempfile.mkdtemp(prefix="linectl-bench-ai-"))
        engine = make_engine(db_url, pool_size=4)
        from shared.config import load_settings

        workers = load_settings().gateway_worker_count
        print(f"gateway: python -m gateway, {workers} worker processes, AI queue straight on PostgreSQL;"
              f" runtimes: threads in {clients} client processes; {os.cpu_count()} cores")
        print(f"{'protocol':>8} {'runtimes':>8} {'jobs':>5} | {'cycles/s':>9} {'lock p50':>9} {'lock p99':>9} |"
              f" {'raw lock/s':>10} {'raw p50':>8} {'raw p99':>8} | {'HTTP/raw':>8}")
        for runtimes, jobs_total in parse_runs():
            raw_rate, raw_times = raw_locks(db_url, engine, runtimes, jobs_total)
            for claim in (False, True):
                seed(engine, jobs_total)
                done, rate, lock_times = full_cycles(url, runtimes, claim, clients)
                assert done == jobs_total, (done, jobs_total)
                with engine.connect() as c:
                    succeeded = c.execute(text("SELECT count(*) FROM ai_runtime_job WHERE status = 'succeeded'"
                                               " AND attempt_no = 1")).scalar()
                assert succeeded == jobs_total, (succeeded, jobs_total)
                print(f"{'claim' if claim else 'seed':>8} {runtimes:>8} {jobs_total:>5} | {rate:>9.1f}"
                      f" {pct(lock_times, 50):>7.1f}ms {pct(lock_times, 99):>7.1f}ms |"
                      f" {raw_rate:>10.0f} {pct(raw_times, 50):>6.2f}ms {pct(raw_times, 99):>6.2f}ms |"
                      f" {rate / raw_rate:>8.3f}")
        print("(seed: poll+lock+heartbeat+result per job; claim: poll(claim)+heartbeat+result;"
              " every job succeeded exactly once, at attempt 1)")

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
        for _ in range(200):
            t0 = time.perf_counter()
            assert len(probe.poll(caps, limit=50)) == 50
            http_times.append(time.perf_counter() - t0)
        sql50, http50 = pct(sql_times, 50), pct(http_times, 50)
        print(f"poll (limit 50, {POLL_ROWS // 1000}k pending): SQL p50 {sql50:.2f} ms, p99 {pct(sql_times, 99):.2f} ms;"
              f" HTTP p50 {http50:.2f} ms, p99 {pct(http_times, 99):.2f} ms; HTTP/SQL {http50 / sql50:.2f}x")
        engine.dispose()
    finally:
        if gateway is not None:
            stop_process(gateway, timeout=30)
        dbs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
