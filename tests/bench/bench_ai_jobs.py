"""AI job queue throughput (a plain script: ``make bench``).

Full job cycles per second over HTTP against the real gateway
(``python -m gateway``, its default worker processes), which serves the queue
straight from PostgreSQL: poll → lock → heartbeat → result with the offline
provider's output (the seed protocol), and poll(claim) → heartbeat → result
(``claim: true``), at 1, 10, 50 and 200 runtimes. A seed runtime polls a page
of 3 and locks its jobs in the order given, as docs/ai-jobs.md says (the first
is offered to it alone); ``seed/random`` (at 50) polls a wide page (twice the
runtimes, at most 50) and picks at random, as a runtime without that advice
would. Runtimes are coroutines with one keep-alive HTTP connection each
(``AsyncRuntime``: asyncio streams), at most ``BENCH_AI_PER_CLIENT`` (100) to
a client process and at least 2 processes, so the client is not the bound and
its own cost per cycle does not grow with the fleet: 200 runtimes are 200
processes on other machines, not threads in two, and threads in one process
contend for the GIL, more of them more (runtimes as threads on ``LeanClient``,
25 to a process, had cost the client a quarter more CPU per cycle at 200
runtimes than at 10). A runtime whose poll finds nothing waits ``pollIntervalMs`` (seed 000;
the reference runtime's 2 s) before polling again, and the run ends at its
last finished job, where every runtime stops.
Lock latency p50/p99 as the runtimes see it (with ``claim`` the poll that
locks), and the gateway's CPU per request (its worker processes' CPU time
over the requests the runtimes sent). Per cycle: the requests sent, the locks
lost, and the CPU of the gateway's workers, of the client processes and of
the rest of the machine (PostgreSQL, mostly, and the kernel), so a rate that
falls with the fleet shows where. In the same run, the reference: the
same conditional-UPDATE lock done directly with psycopg2 (no HTTP), its rate,
and the ratio. Then the poll at 100k pending jobs, as SQL (the statements the
gateway runs, as it runs them) and over HTTP: on the wire (a raw keep-alive
socket: what the gateway and the network add), through ``LeanClient``
(plus http.client's and json's parsing) and through ``requests``,
interleaved; the profile of one poll/lock/heartbeat/result cycle in-process
(``profile_runtime_requests.py``); and the issue's targets as ratios.

PostgreSQL is embedded unless LINECTL_TEST_DATABASE_URL is set.
``BENCH_AI_RUNS=1:150,10:600`` picks the runs; ``BENCH_AI_PER_CLIENT`` the
runtimes per client process; ``BENCH_AI_TAIL=0`` leaves out the 100k poll and
the profile (to compare gateway settings, ``LINECTL_GATEWAY_*``, quickly);
``BENCH_AI_GATEWAY_TREE=<checkout>`` serves the runs with that checkout's
gateway (e.g. main's, for "before" figures with this same client).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
import random
import resource
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
from services.ai_jobs.prepared import prepared_unit  # noqa: E402
from services.ai_runtime.client import ProtocolError, RuntimeClient  # noqa: E402
from services.ai_runtime.providers import OfflineProvider  # noqa: E402
from shared.db.engine import make_engine, make_sessionmaker  # noqa: E402
from tests.support.ai_jobs import insert_pending_jobs  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402

TOKENS = "platform:platform-token-000001,runtime:runtime-token-000001"
RUNTIME_TOKEN = "runtime-token-000001"
DEFAULT_RUNS = ((1, 150), (10, 600), (50, 1000), (200, 2000))  # (runtimes, jobs)
RANDOM_PICK_AT = 50  # runtimes: where seed/random runs too
POLL_ROWS = 100_000
JOB_TYPE = "learning_state_analysis"
# After an empty poll a runtime waits pollIntervalMs (seed 000, section 10) before
# polling again: the reference runtime's --poll-interval default.
IDLE_POLL_INTERVAL = 2.0


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
        self.requests = 0

    def _post(self, path, body):
        import http.client

        data = json.dumps(body).encode()
        self.requests += 1
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


class Finish:
    """Shared by the client processes: the cycles done, and the moment the last
    job finished. The runtimes stop there, so the run ends at its last cycle:
    a fleet's closing empty polls (3 each, 600 at 200 runtimes) are not work."""

    def __init__(self, ctx, jobs_total):
        self.jobs_total = jobs_total
        self.count = ctx.Value("i", 0)
        self.at = ctx.Value("d", 0.0)
        self.all_done = ctx.Event()

    def one_done(self):
        with self.count.get_lock():
            self.count.value += 1
            if self.count.value == self.jobs_total:
                self.at.value = time.time()
                self.all_done.set()


class WireClient:
    """One poll, pre-encoded, on a raw keep-alive socket: the request's bytes
    sent and the response read to its Content-Length (its status checked; its
    JSON by :meth:`check`, outside the timing). What the gateway and the
    network cost, without a client library's parsing."""

    def __init__(self, url, token, rid, caps, limit):
        from urllib.parse import urlsplit

        parts = urlsplit(url)
        body = json.dumps({"runtimeInstanceId": rid, "capabilities": caps, "limit": limit}).encode()
        self.limit = limit
        self.request = (f"POST /internal/runtime/jobs/poll HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n"
                        f"Content-Length: {len(body)}\r\n\r\n").encode() + body
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def poll(self):
        self.sock.sendall(self.request)
        data = b""
        while b"\r\n\r\n" not in data:
            data += self.sock.recv(65536)
        head, body = data.split(b"\r\n\r\n", 1)
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += self.sock.recv(65536)
        assert head.startswith(b"HTTP/1.1 200"), head
        self.last = body

    def check(self):
        assert len(json.loads(self.last)["jobs"]) == self.limit


class AsyncRuntime:
    """The same requests and answers as :class:`LeanClient`, on one keep-alive
    asyncio stream: a client process runs its runtimes as coroutines on one
    event loop, so the client's cost per request does not grow with the
    runtimes it runs (threads contend for the GIL, and more of them more)."""

    def __init__(self, host, port, token, rid):
        self.host, self.port, self.rid = host, port, rid
        self.head = (f"Host: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
                     "Content-Type: application/json\r\n").encode()
        self.reader = self.writer = None
        self.requests = 0

    async def _post(self, path, body):
        data = json.dumps(body).encode()
        self.requests += 1
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        self.writer.write(b"POST /internal/runtime" + path.encode() + b" HTTP/1.1\r\n" + self.head
                          + b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        raw = await self.reader.readexactly(length) if length else b""
        answer = json.loads(raw) if raw else None
        if status >= 400:
            raise ProtocolError(status, answer["error"]["code"], answer["error"]["message"])
        return answer

    async def poll(self, caps, limit=20, claim=False):
        return (await self._post("/jobs/poll", {"runtimeInstanceId": self.rid, "capabilities": caps,
                                                "limit": limit, "claim": claim}))["jobs"]

    async def lock(self, job_id):
        return await self._post(f"/jobs/{job_id}/lock", {"runtimeInstanceId": self.rid})

    async def heartbeat(self, job_id, attempt):
        await self._post(f"/jobs/{job_id}/heartbeat", {"runtimeInstanceId": self.rid, "attemptNo": attempt})

    async def succeed(self, job_id, attempt, output):
        return await self._post(f"/jobs/{job_id}/result", {
            "runtimeInstanceId": self.rid, "attemptNo": attempt, "status": "succeeded",
            "output": output, "outputHash": output_hash(output)})


async def _async_cycles(client, offline, claim, page_size, lock_times, done, at_random, lost, finish):
    """One runtime's cycles until the run ends (or it polled nothing three times)."""
    idle = 0
    while idle < 3 and not finish.all_done.is_set():
        if claim:
            t0 = time.perf_counter()
            page = await client.poll([JOB_TYPE], limit=1, claim=True)
            if page:
                lock_times.append(time.perf_counter() - t0)
        else:
            page = await client.poll([JOB_TYPE], limit=page_size)
            if at_random:
                random.shuffle(page)
        if not page:
            idle += 1
            for _ in range(int(IDLE_POLL_INTERVAL / 0.05)):  # pollIntervalMs, or until the run ends
                if finish.all_done.is_set():
                    break
                await asyncio.sleep(0.05)
            continue
        idle = 0
        for job in page:
            if not claim:
                t0 = time.perf_counter()
                try:
                    lease = await client.lock(job["id"])
                except ProtocolError as exc:
                    if exc.code == "JOB_ALREADY_LOCKED":
                        lost.append(1)
                        continue
                    raise
                lock_times.append(time.perf_counter() - t0)
                job = {**job, "attemptNo": lease["attemptNo"]}
            await client.heartbeat(job["id"], job["attemptNo"])
            await client.succeed(job["id"], job["attemptNo"], offline.complete(job, None, None))
            done.append(1)
            finish.one_done()
            break


def async_client_process(url, ids, claim, page_size, start_at, out_q, at_random, finish):
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    lock_times, done, lost = [], [], []
    offline = OfflineProvider()
    clients = [AsyncRuntime(parts.hostname, parts.port, RUNTIME_TOKEN, f"bench-{i}") for i in ids]

    async def run():
        await asyncio.sleep(max(start_at - time.time(), 0))
        await asyncio.gather(*(_async_cycles(c, offline, claim, page_size, lock_times, done, at_random, lost,
                                             finish) for c in clients))
        for c in clients:
            if c.writer is not None:
                c.writer.close()

    asyncio.run(run())
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out_q.put((len(done), lock_times, time.time(), sum(c.requests for c in clients), len(lost),
               usage.ru_utime + usage.ru_stime))


def _cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_seconds() -> float:
    """CPU seconds every core spent on anything but idle and iowait, from /proc/stat."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = (
        int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def gateway_cpu(master_pid: int) -> float:
    """CPU seconds of the gateway's worker processes (the master only supervises)."""
    try:
        children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    except OSError:
        return 0.0
    return sum(_cpu_seconds(int(pid)) for pid in children)


def full_cycles(url, runtimes, jobs_total, claim, clients, master_pid, at_random=False):
    ctx = mp.get_context("fork")
    out_q = ctx.Queue()
    start_at = time.time() + 1.0 + runtimes / 200
    # As docs/ai-jobs.md advises: a page of about one's free slots (1) plus room
    # for a lost lock or two, tried in order. The random picker takes the wide
    # page a runtime without that advice would.
    page_size = min(50, max(runtimes * 2, 5)) if at_random else 3
    finish = Finish(ctx, jobs_total)
    procs = [ctx.Process(target=async_client_process,
                         args=(url, list(range(runtimes))[k::clients], claim, page_size, start_at, out_q,
                               at_random, finish))
             for k in range(min(clients, runtimes))]
    cpu_before, busy_before = gateway_cpu(master_pid), machine_busy_seconds()
    for p in procs:
        p.start()
    finish.all_done.wait(timeout=600)
    cpu, busy = gateway_cpu(master_pid) - cpu_before, machine_busy_seconds() - busy_before
    results = [out_q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    requests = sum(r[3] for r in results)
    done = sum(r[0] for r in results)
    lock_times = [t for r in results for t in r[1]]
    elapsed = finish.at.value - start_at
    client_cpu = sum(r[5] for r in results)
    per_cycle = {"requests": requests / max(done, 1), "lost locks": sum(r[4] for r in results) / max(done, 1),
                 "gateway ms": cpu / max(done, 1) * 1000, "clients ms": client_cpu / max(done, 1) * 1000,
                 "rest ms": (busy - cpu - client_cpu) / max(done, 1) * 1000}
    return done, done / elapsed, lock_times, cpu / max(requests, 1), per_cycle


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
    tree = os.environ.get("BENCH_AI_GATEWAY_TREE")
    if tree:  # first on the path, also for what the venv's .pth imports at start-up
        env["PYTHONPATH"] = tree
    proc = subprocess.Popen([sys.executable, "-m", "gateway", "--name", "bench-gateway"], env=env,
                            cwd=tree or ROOT)
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
    per_client = int(os.environ.get("BENCH_AI_PER_CLIENT", "100"))
    dbs = TestDatabases()
    gateway = None
    try:
        db_url = dbs.fresh()
        gateway, url, probe = start_gateway(db_url, tempfile.mkdtemp(prefix="linectl-bench-ai-"))
        engine = make_engine(db_url, pool_size=4)
        from shared.config import load_settings

        workers = load_settings().gateway_worker_count
        print(f"gateway: python -m gateway ({os.environ.get('BENCH_AI_GATEWAY_TREE') or 'this checkout'}),"
              f" {workers} worker processes, AI queue straight on PostgreSQL;"
              f" runtimes: coroutines, at most {per_client} to a client process (at least 2);"
              f" {os.cpu_count()} cores")
        print(f"{'protocol':>11} {'runtimes':>8} {'jobs':>5} | {'cycles/s':>9} {'lock p50':>9} {'lock p99':>9} |"
              f" {'raw lock/s':>10} {'raw p50':>8} {'raw p99':>8} | {'HTTP/raw':>8} | {'gw CPU/req':>10}")
        rates, cycles = {}, {}
        for runtimes, jobs_total in parse_runs():
            raw_rate, raw_times = raw_locks(db_url, engine, runtimes, jobs_total)
            protocols = [("seed", False, False), ("claim", True, False)]
            if runtimes == RANDOM_PICK_AT:
                protocols.insert(1, ("seed/random", False, True))
            for name, claim, at_random in protocols:
                seed(engine, jobs_total)
                done, rate, lock_times, cpu_per_request, per_cycle = full_cycles(
                    url, runtimes, jobs_total, claim, max(2, -(-runtimes // per_client)), gateway.pid, at_random)
                assert done == jobs_total, (done, jobs_total)
                with engine.connect() as c:
                    succeeded = c.execute(text("SELECT count(*) FROM ai_runtime_job WHERE status = 'succeeded'"
                                               " AND attempt_no = 1")).scalar()
                assert succeeded == jobs_total, (succeeded, jobs_total)
                rates[(name, runtimes)] = rate
                print(f"{name:>11} {runtimes:>8} {jobs_total:>5} | {rate:>9.1f}"
                      f" {pct(lock_times, 50):>7.1f}ms {pct(lock_times, 99):>7.1f}ms |"
                      f" {raw_rate:>10.0f} {pct(raw_times, 50):>6.2f}ms {pct(raw_times, 99):>6.2f}ms |"
                      f" {rate / raw_rate:>8.3f} | {cpu_per_request * 1000:>7.2f} ms", flush=True)
                cycles[(name, runtimes)] = per_cycle
        print("(seed: poll+lock+heartbeat+result per job, the page tried in order; seed/random: the same, picking"
              " at random; claim: poll(claim)+heartbeat+result; every job succeeded exactly once, at attempt 1;"
              " gw CPU/req: the gateway workers' CPU over the requests sent, lost locks and empty polls included)")
        print("per cycle: requests and lost locks; CPU of the gateway workers, of the client processes, and of"
              " the rest of the machine (PostgreSQL, mostly)")
        for (name, runtimes), c in cycles.items():
            print(f"{name:>11} {runtimes:>8} | " + "  ".join(f"{k} {v:.2f}" for k, v in c.items()))

        if os.environ.get("BENCH_AI_TAIL", "1") == "0":
            return 0
        seed(engine, POLL_ROWS)
        with engine.connect() as c:  # the big DELETE's dead rows gone now, not by autovacuum mid-measure
            c.execution_options(isolation_level="AUTOCOMMIT").execute(text("VACUUM ANALYZE ai_runtime_job"))
        sm = make_sessionmaker(engine)
        timings = QueueTimings()
        caps = ["learning_state_analysis", "quiz_generation", "flashcard_generation"]
        lean = LeanClient(url, RUNTIME_TOKEN, "probe")
        wire = WireClient(url, RUNTIME_TOKEN, "probe", caps, 50)

        def sql():  # the statements the gateway runs for a poll, as it runs them (prepared, bare driver)
            with prepared_unit(engine) as unit:
                assert len(repo.poll(unit, timings, "poller", caps, 50)) == 50

        def sqlalchemy():  # the same through SQLAlchemy's session (planned afresh each time)
            with sm() as s, s.begin():
                assert len(repo.poll(s, timings, "poller-sa", caps, 50)) == 50

        paths = {"sql": sql, "sqlalchemy": sqlalchemy,
                 "wire": lambda: wire.poll(),
                 "lean": lambda: len(lean.poll(caps, limit=50)) == 50 or sys.exit("short page"),
                 "requests": lambda: len(probe.poll(caps, limit=50)) == 50 or sys.exit("short page")}
        times = {name: [] for name in paths}
        for n in range(330):  # interleaved, so what else the machine does falls on every path alike
            for name, call in paths.items():
                t0 = time.perf_counter()
                call()
                if n >= 30:  # the first rounds warm each path
                    times[name].append(time.perf_counter() - t0)
        wire.check()
        p50 = {name: pct(t, 50) for name, t in times.items()}
        sql50, http50 = p50["sql"], p50["wire"]
        print(f"poll (limit 50, {POLL_ROWS // 1000}k pending), p50 (p99):"
              f" SQL {sql50:.2f} ms ({pct(times['sql'], 99):.2f});"
              f" HTTP on the wire {http50:.2f} ms ({pct(times['wire'], 99):.2f}), {http50 / sql50:.2f}x;"
              f" HTTP with http.client and json (LeanClient) {p50['lean']:.2f} ms, {p50['lean'] / sql50:.2f}x;"
              f" with `requests` (RuntimeClient) {p50['requests']:.2f} ms, {p50['requests'] / sql50:.2f}x;"
              f" SQL through SQLAlchemy's session, unprepared: {p50['sqlalchemy']:.2f} ms", flush=True)

        from tests.bench.profile_runtime_requests import profile, report

        profiled = profile(dbs.fresh(), 200)
        print(report(profiled))

        def ratio(a, b):
            return rates[a] / rates[b] if a in rates and b in rates else float("nan")

        def at(key):
            return rates.get(key, float("nan"))

        print("targets (issue 28):")
        print(f"  seed 50/10   {ratio(('seed', 50), ('seed', 10)):5.2f}  (>= 1)    "
              f"seed 200/10 {ratio(('seed', 200), ('seed', 10)):5.2f}  (>= 1)")
        print(f"  seed at 50   {at(('seed', 50)):6.1f} cycles/s (>= 200)   claim at 50 {at(('claim', 50)):6.1f}"
              f" cycles/s (>= 300)")
        print(f"  poll HTTP/SQL at 100k {http50 / sql50:.2f}x on the wire, {p50['lean'] / sql50:.2f}x with"
              f" LeanClient's parsing (<= 1.5)   gateway CPU per request (profile)"
              f" {profiled['per_request_ms']:.2f} ms (was about 1 ms)")
        engine.dispose()
    finally:
        if gateway is not None:
            stop_process(gateway, timeout=30)
        dbs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
