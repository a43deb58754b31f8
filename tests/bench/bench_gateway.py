"""The gateway under load, against the stand-in line_controller on the real
transport, with the layer below each measurement as the reference:

* HTTP read  ``GET /api/work-orders?limit=50``, 20 concurrent clients
  (reference: the same query + serialisation straight on the database);
* HTTP command ``POST /api/work-orders`` (CreateOrder: HTTP → RPC → loop →
  reply), 20 concurrent clients, and one client on an idle line
  (reference: the same command as a direct nameko RPC);
* websocket: committed event_log row → frame at the client, with 1, 50 and
  200 connected clients (reference: the same event at a bare kombu consumer
  — the gateway's relay without the websocket hop).

    python tests/bench/bench_gateway.py [--requests 2000] [--events 60]

Targets: p99 command round trip < 50 ms on an idle line; event-to-frame p99
< 50 ms at 200 clients. The load clients and the stand-in loop share this
process (eventlet) and the machine's cores with the gateway: figures are
indicative, and the concurrent command rate is bounded by the stand-in's
serial loop, not by the gateway.
"""

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

import requests  # noqa: E402
import websocket  # noqa: E402
from nameko.containers import ServiceContainer  # noqa: E402
from nameko.standalone.rpc import ClusterRpcProxy  # noqa: E402
from sqlalchemy import func, select  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gateway.relay import EventRelay  # noqa: E402
from shared import serialize  # noqa: E402
from shared.db.engine import make_engine, make_sessionmaker  # noqa: E402
from shared.db.models import EventLog, WorkOrder  # noqa: E402
from tests.gateway.standin import EventWriter, StandInLineController, append_events, seed_line  # noqa: E402
from tests.support.db import TestDatabases  # noqa: E402
from tests.support.timing import durations  # noqa: E402

TOKEN = "bench-operator-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
CONCURRENCY = 20


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))] * 1000


def transport(db_url):
    """pgsql:// when that transport exists, else a private RabbitMQ vhost."""
    try:
        import shared.transport.pgsql  # noqa: F401

        return "pgsql://" + db_url.split("://", 1)[1], None
    except ImportError:
        vhost = f"linectl-bench-{os.getpid()}"
        for args in (["add_vhost", vhost], ["set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"]):
            subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=60)
        return f"amqp://guest:guest@127.0.0.1:5672/{vhost}", vhost


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(fn, total, concurrency):
    """Run ``fn()`` ``total`` times from ``concurrency`` green clients: (req/s, latencies)."""
    latencies = []
    per_client = total // concurrency

    def client():
        session = requests.Session()
        for _ in range(per_client):
            t0 = time.perf_counter()
            fn(session)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    pool = eventlet.GreenPool(concurrency)
    for _ in range(concurrency):
        pool.spawn(client)
    pool.waitall()
    return len(latencies) / (time.perf_counter() - start), latencies


def ws_latency(base, writer, clients, events):
    """Committed-row → frame latencies over ``clients`` websockets (seconds)."""
    url = base.replace("http://", "ws://") + "/ws"
    sockets = [websocket.create_connection(url, header=[f"Authorization: {AUTH['Authorization']}"],
                                           timeout=60) for _ in range(clients)]
    committed = {}
    arrivals = []
    with writer.sessionmaker() as s:
        first = s.scalar(select(func.coalesce(func.max(EventLog.seq), 0))) + 1
    final = {"seq": first + events - 1}  # one event per transaction, gapless seqs

    def reader(ws):
        while True:
            frame = json.loads(ws.recv())
            now = time.perf_counter()
            arrivals.append((frame["seq"], now))
            if frame["seq"] == final["seq"]:
                return

    pool = eventlet.GreenPool(clients)
    for ws in sockets:
        pool.spawn(reader, ws)
    eventlet.sleep(0.5)
    for i in range(events):
        writer.write_timed([("BenchTick", {"i": i})], committed)
        eventlet.sleep(0.03)
    pool.waitall()
    for ws in sockets:
        ws.close()
    return [t - committed[seq] for seq, t in arrivals if seq in committed]


class TimedWriter(EventWriter):
    def write_timed(self, events, committed):
        with self.sessionmaker.begin() as s:
            frames = append_events(s, events)
        now = time.perf_counter()
        for f in frames:
            committed[f["seq"]] = now
        self.publish("line_controller", "line_events", {"txId": frames[0]["txId"], "events": frames})
        return frames


def bare_consumer_latency(amqp_uri, writer, events):
    """The reference: frame arrival at a bare kombu consumer (the relay) in this process."""
    relay = EventRelay(amqp_uri)
    relay.start()
    sub = relay.subscribe(100000)
    committed, latencies = {}, []
    for i in range(events):
        frames = writer.write_timed([("BenchTick", {"i": i})], committed)
        while True:
            frame = sub.queue.get(timeout=30)
            if frame["seq"] == frames[-1]["seq"]:
                latencies.append(time.perf_counter() - committed[frame["seq"]])
                break
        eventlet.sleep(0.03)
    relay.stop()
    return latencies


def row(name, value, ref, unit, target=None):
    ratio = f"{value / ref:6.2f}x" if ref else "     -"
    ref_s = f"{ref:10.2f}" if ref is not None else "         -"
    tgt = f"{target}" if target else ""
    print(f"{name:<44} {value:10.2f} {ref_s} {ratio} {unit:<6} {tgt}")


ORDER = {"productId": "SHAFT-B", "quantity": 1}  # the order each command creates


def start_gateway(db_url: str, amqp_uri: str, data_dir: str) -> tuple[subprocess.Popen, str]:
    """``python -m gateway`` on a free port; the process and its base URL."""
    port = free_port()
    env = {**os.environ, "LINECTL_DATABASE_URL": db_url, "LINECTL_AMQP_URI": amqp_uri,
           "LINECTL_TOKENS": f"operator:{TOKEN}", "LINECTL_HTTP_PORT": str(port),
           "LINECTL_DATA_DIR": data_dir, "LINECTL_LOG_LEVEL": "WARNING"}
    gw = subprocess.Popen([sys.executable, "-m", "gateway", "--name", "gateway", "--threads", "300"],
                          env=env, cwd=ROOT)
    return gw, f"http://127.0.0.1:{port}"


def wait_ready(base: str) -> None:
    for _ in range(300):
        try:
            if requests.get(base + "/readyz", timeout=1).ok:
                break
        except requests.RequestException:
            pass
        eventlet.sleep(0.1)


def measure_reads(base: str, maker, session, requests_n: int) -> None:
    """Work-order reads under load and one at a time (reference: the same query and serialisation)."""
    def read(session):
        r = session.get(base + "/api/work-orders?limit=50", headers=AUTH)
        assert r.status_code == 200

    def read_ref():
        with maker() as s:
            [serialize.work_order(o) for o in s.scalars(select(WorkOrder).order_by(WorkOrder.id).limit(50))]

    rps, lat = load(read, requests_n, CONCURRENCY)
    row("read: requests/s (20 clients)", rps, None, "req/s")
    row("read: p50 (20 clients)", pct(lat, 50), None, "ms")
    row("read: p99 (20 clients)", pct(lat, 99), None, "ms")
    idle = durations(lambda: read(session), 300)
    ref_lat = durations(read_ref, 300)
    row("read idle: p50 | ref: same query+serialize", pct(idle, 50), pct(ref_lat, 50), "ms")
    row("read idle: p99 | ref: same query+serialize", pct(idle, 99), pct(ref_lat, 99), "ms")


def measure_commands(base: str, config: dict, session, commands_n: int) -> None:
    """CreateOrder under load and one at a time (reference: the same command by direct RPC)."""
    def command(session):
        r = session.post(base + "/api/work-orders", json=ORDER, headers=AUTH)
        assert r.status_code == 201, r.text

    rps, lat = load(command, commands_n, CONCURRENCY)
    row("command: requests/s (20 clients)", rps, None, "req/s")
    row("command: p99 (20 clients)", pct(lat, 99), None, "ms")
    idle = durations(lambda: command(session), 200)
    with ClusterRpcProxy(config, timeout=10) as rpc:
        ref = durations(lambda: rpc.line_controller.command(
            "CreateOrder", ORDER, "bench", command_id=uuid.uuid4().hex, wait_seconds=2), 200)
    row("command idle: p50 | ref: direct RPC", pct(idle, 50), pct(ref, 50), "ms")
    row("command idle: p99 | ref: direct RPC", pct(idle, 99), pct(ref, 99), "ms", "< 50 ms")


def measure_events(base: str, writer, amqp_uri: str, events: int) -> None:
    """Committed event -> websocket frame at 1, 50, 200 clients (reference: a bare kombu consumer)."""
    ref = bare_consumer_latency(amqp_uri, writer, events)
    for clients in (1, 50, 200):
        lat = ws_latency(base, writer, clients, events)
        tgt = "< 50 ms" if clients == 200 else None
        row(f"event→frame p50, {clients} clients | ref: kombu", pct(lat, 50), pct(ref, 50), "ms")
        row(f"event→frame p99, {clients} clients | ref: kombu", pct(lat, 99), pct(ref, 99), "ms", tgt)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--commands", type=int, default=1000)
    parser.add_argument("--events", type=int, default=60)
    args = parser.parse_args()

    dbs = TestDatabases()
    db_url = dbs.fresh()
    amqp_uri, vhost = transport(db_url)
    engine = make_engine(db_url)
    maker = make_sessionmaker(engine)
    seed_line(maker)
    config = {"AMQP_URI": amqp_uri, "serializer": "json", "LINECTL_DATABASE_URL": db_url,
              "max_workers": 40}
    container = ServiceContainer(StandInLineController, config)
    container.start()
    tmp = tempfile.TemporaryDirectory()
    gw, base = start_gateway(db_url, amqp_uri, tmp.name)
    try:
        wait_ready(base)
        for _ in range(50):
            requests.post(base + "/api/work-orders", json=ORDER, headers=AUTH).raise_for_status()

        print(f"gateway benchmark ({amqp_uri.split(':')[0]} transport, {CONCURRENCY} clients)")
        print(f"{'measure':<44} {'gateway':>10} {'reference':>10} {'ratio':>7} unit   target")
        session = requests.Session()
        measure_reads(base, maker, session, args.requests)
        measure_commands(base, config, session, args.commands)
        measure_events(base, TimedWriter(maker, config), amqp_uri, args.events)
    finally:
        gw.terminate()
        gw.wait(timeout=20)
        container.stop()
        engine.dispose()
        dbs.close()
        if vhost:
            subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=60)

if __name__ == "__main__":
    main()
