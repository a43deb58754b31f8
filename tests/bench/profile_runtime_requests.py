"""Where a runtime request's CPU goes in the gateway (a plain script; also
imported by ``bench_ai_jobs.py``).

The gateway's WSGI app (``create_app``), in this process, on a fresh
database: ``CYCLES`` full job cycles (poll → lock → heartbeat → result, the
seed protocol) called straight through WSGI with ready-made environs, so
neither HTTP parsing nor a client is measured, only what the app spends. It
reports the CPU (``time.thread_time``, this thread only) per request of each kind, and a
cProfile of the same calls grouped by the package the time is spent in
(own time of each function), so the cuts can be aimed.

``python tests/bench/profile_runtime_requests.py [cycles]``
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from services.ai_jobs.domain import output_hash  # noqa: E402
from services.ai_runtime.providers import OfflineProvider  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from tests.support.ai_jobs import insert_pending_jobs  # noqa: E402

TOKEN = "runtime-token-000001"
TOKENS = f"runtime:{TOKEN}"
JOB_TYPE = "learning_state_analysis"
KINDS = ("poll", "lock", "heartbeat", "result")

# Package of a profiled function → the name it is reported under.
BUCKETS = (
    ("marshmallow", "marshmallow/webargs/flask-smorest"), ("webargs", "marshmallow/webargs/flask-smorest"),
    ("flask_smorest", "marshmallow/webargs/flask-smorest"), ("werkzeug", "flask/werkzeug"),
    ("flask", "flask/werkzeug"), ("sqlalchemy", "sqlalchemy"), ("psycopg2", "psycopg2 (driver + waiting)"),
    ("prometheus_client", "metrics"), ("gateway/metrics", "metrics"), ("json", "json"),
    ("orjson", "json"), ("jsonschema", "jsonschema"), ("services/ai_jobs", "services.ai_jobs"),
    ("gateway", "gateway (own)"), ("shared", "shared"),
)


def _bucket(filename: str, name: str) -> str:
    if filename.startswith("~") or filename.startswith("<"):
        if "psycopg2" in name or "cursor" in name:
            return "psycopg2 (C: send, receive, convert)"
        if "json" in name:
            return "json"
        return "builtins (C calls)"
    for needle, name in BUCKETS:
        if f"/{needle}/" in filename or f"/{needle}.py" in filename:
            return name
    return "other (stdlib, ...)"


def environ(method: str, path: str, body: dict) -> dict:
    data = json.dumps(body).encode()
    return {"REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
            "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "127.0.0.1:8000", "HTTP_AUTHORIZATION": f"Bearer {TOKEN}",
            "CONTENT_TYPE": "application/json", "CONTENT_LENGTH": str(len(data)),
            "wsgi.input": io.BytesIO(data), "wsgi.url_scheme": "http", "wsgi.errors": sys.stderr,
            "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
            "wsgi.version": (1, 0), "REMOTE_ADDR": "127.0.0.1"}


def call(app, method, path, body):
    status = []
    chunks = app(environ(method, path, body), lambda s, h, *a: status.append(s))
    raw = b"".join(chunks)
    if hasattr(chunks, "close"):
        chunks.close()
    return int(status[0].split()[0]), (json.loads(raw) if raw else None)


def cycles(app, n: int, cpu: dict, rid: str = "prof") -> None:
    offline = OfflineProvider()
    for _ in range(n):
        t = time.thread_time()
        status, page = call(app, "POST", "/internal/runtime/jobs/poll",
                            {"runtimeInstanceId": rid, "capabilities": [JOB_TYPE], "limit": 20})
        cpu["poll"].append(time.thread_time() - t)
        assert status == 200 and page["jobs"], (status, page)
        job = page["jobs"][0]
        t = time.thread_time()
        status, lease = call(app, "POST", f"/internal/runtime/jobs/{job['id']}/lock", {"runtimeInstanceId": rid})
        cpu["lock"].append(time.thread_time() - t)
        assert status == 200, lease
        attempt = lease["attemptNo"]
        t = time.thread_time()
        status, _ = call(app, "POST", f"/internal/runtime/jobs/{job['id']}/heartbeat",
                         {"runtimeInstanceId": rid, "attemptNo": attempt})
        cpu["heartbeat"].append(time.thread_time() - t)
        assert status == 204
        output = offline.complete(job, None, None)
        t = time.thread_time()
        status, reply = call(app, "POST", f"/internal/runtime/jobs/{job['id']}/result", {
            "runtimeInstanceId": rid, "attemptNo": attempt, "status": "succeeded", "output": output,
            "outputHash": output_hash(output)})
        cpu["result"].append(time.thread_time() - t)
        assert status == 200, reply


def profile(db_url: str, n: int = 300) -> dict:
    """→ {"cpu_ms": {kind: mean ms}, "per_request_ms": mean, "buckets": [(name, ms per request)]}."""
    from gateway.app import create_app
    from shared.config import load_settings

    engine = make_engine(db_url, pool_size=1)
    with engine.begin() as c:
        c.execute(text("DELETE FROM ai_job_transition; DELETE FROM ai_runtime_result; DELETE FROM ai_runtime_job"))
        insert_pending_jobs(c, 2 * n + 50, JOB_TYPE)
        c.execute(text("ANALYZE ai_runtime_job"))
    engine.dispose()
    settings = load_settings({"LINECTL_DATABASE_URL": db_url, "LINECTL_TOKENS": TOKENS,
                              "LINECTL_DATA_DIR": tempfile.mkdtemp(prefix="linectl-prof-"),
                              "LINECTL_AI_RETRY_BACKOFF_SECONDS": "0", "LINECTL_LOG_LEVEL": "WARNING"})
    app = create_app(settings)
    try:
        cycles(app, 20, {k: [] for k in KINDS})  # warm: pools, caches, first plans
        cpu = {k: [] for k in KINDS}
        cycles(app, n, cpu)
        prof = cProfile.Profile(time.thread_time)  # CPU, not waiting on PostgreSQL
        prof.enable()
        cycles(app, n, {k: [] for k in KINDS})
        prof.disable()
    finally:
        app.extensions["linectl"].close()
    stats = pstats.Stats(prof)
    own: dict[str, float] = {}
    for (filename, _line, name), (_cc, _nc, tottime, _ct, _callers) in stats.stats.items():
        bucket = _bucket(filename, name)
        own[bucket] = own.get(bucket, 0.0) + tottime
    requests = n * len(KINDS)
    total = sum(own.values())
    # cProfile inflates every call; scale its split to the measured CPU.
    measured = sum(sum(v) for v in cpu.values()) / requests * 1000
    buckets = sorted(((name, secs / total * measured) for name, secs in own.items()), key=lambda b: -b[1])
    return {"cpu_ms": {k: sum(v) / len(v) * 1000 for k, v in cpu.items()}, "per_request_ms": measured,
            "buckets": buckets}


def report(result: dict) -> str:
    lines = ["gateway CPU per request (in-process WSGI, no HTTP parsing): "
             + ", ".join(f"{k} {v:.2f} ms" for k, v in result["cpu_ms"].items())
             + f"; mean {result['per_request_ms']:.2f} ms"]
    lines.append("  where it goes (cProfile own time, scaled to the measured mean):")
    for name, ms in result["buckets"]:
        lines.append(f"    {name:<38} {ms:6.3f} ms  {ms / result['per_request_ms'] * 100:5.1f} %")
    return "\n".join(lines)


def main() -> int:
    from tests.support.db import TestDatabases

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    dbs = TestDatabases()
    try:
        print(report(profile(dbs.fresh(), n)))
    finally:
        dbs.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
