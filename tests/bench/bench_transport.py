"""Benchmark of the pgsql:// transport against RabbitMQ and kombu's sqlalchemy transport.

Plain script (``make bench``). Starts its own embedded PostgreSQL (durable settings:
fsync on), runs the Greeter service of the transport tests in a separate process,
and calls it from this process:

* nameko RPC round trip, p50/p99 over ``--calls`` sequential calls (default 1000);
* nameko RPC throughput with 10 and 50 concurrent callers (one proxy each);
* CPU burnt by the idle service process and an idle caller process (a
  ClusterRpcProxy that made one call) over ``--idle`` seconds;
* kombu's own sqlalchemy transport cannot run nameko at all (its bindings live
  in each Connection's memory and its messages lack ``content_type``), so it is
  compared on a plain kombu request/reply echo over the default exchange, with
  only ``--sqla-calls`` calls (default 20) at its default 1 s polling; the same
  echo runs on pgsql:// for the ratio.

RabbitMQ (127.0.0.1:5672, guest/guest) columns are left empty when it does not answer.
"""

from __future__ import annotations

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import psycopg2  # noqa: E402
from kombu import Connection, Consumer, Exchange, Producer, Queue  # noqa: E402
from nameko.standalone.rpc import ServiceRpcProxy  # noqa: E402

import shared  # noqa: E402,F401  (registers pgsql://)
from services.stack.migrate import upgrade  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402

RABBIT = "amqp://guest:guest@127.0.0.1:5672/"

IDLE_CALLER = """
import eventlet; eventlet.monkey_patch()
import sys, time, shared
from nameko.standalone.rpc import ClusterRpcProxy
with ClusterRpcProxy({"AMQP_URI": sys.argv[1], "serializer": "json"}, timeout=30) as cluster:
    cluster.greeter.hello("idle")
    print("ready", flush=True)
    time.sleep(3600)
"""


def rabbit_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5672), timeout=0.5):
            return True
    except OSError:
        return False


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Child:
    def __init__(self, args):
        self.proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise RuntimeError(f"{args} did not start: {line!r}")

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def pct(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def nameko_figures(uri: str, calls: int, idle: float) -> dict:
    config = {"AMQP_URI": uri, "serializer": "json"}
    service = Child(["-m", "tests.transport.nameko_peer", uri])
    try:
        with ServiceRpcProxy("greeter", config, timeout=30) as greeter:
            for _ in range(50):  # warm up
                greeter.hello("w")
            latencies = []
            for _ in range(calls):
                started = time.perf_counter()
                greeter.hello("b")
                latencies.append(time.perf_counter() - started)
        figures = {"p50": statistics.median(latencies) * 1000, "p99": pct(latencies, 99) * 1000}
        for callers in (10, 50):
            figures[f"tput{callers}"] = throughput(config, callers, per_caller=max(20, 2000 // callers))
        caller = Child(["-c", IDLE_CALLER, uri])
        try:
            before = cpu_seconds(service.proc.pid), cpu_seconds(caller.proc.pid)
            time.sleep(idle)
            after = cpu_seconds(service.proc.pid), cpu_seconds(caller.proc.pid)
        finally:
            caller.stop()
        figures["idle_service"] = (after[0] - before[0]) / idle * 100
        figures["idle_caller"] = (after[1] - before[1]) / idle * 100
        return figures
    finally:
        service.stop()


def throughput(config, callers: int, per_caller: int) -> float:
    proxies = [ServiceRpcProxy("greeter", config, timeout=60) for _ in range(callers)]
    started_proxies = [p.start() for p in proxies]
    try:
        for proxy in started_proxies:
            proxy.hello("w")
        start = time.perf_counter()
        pool = eventlet.GreenPool(callers)
        for proxy in started_proxies:
            pool.spawn(lambda p: [p.hello("t") for _ in range(per_caller)], proxy)
        pool.waitall()
        return callers * per_caller / (time.perf_counter() - start)
    finally:
        for proxy in proxies:
            proxy.stop()


def kombu_echo_p50(url: str, calls: int) -> float:
    """p50 of a request/reply echo through two queues of the default exchange
    (transient messages: this compares wake-up latency, not disk flushes)."""
    tag = uuid.uuid4().hex[:8]
    requests = Queue(f"echo-req-{tag}", Exchange(""), routing_key=f"echo-req-{tag}")
    replies = Queue(f"echo-rep-{tag}", Exchange(""), routing_key=f"echo-rep-{tag}")
    stop = threading.Event()

    with Connection(url) as server_conn, Connection(url) as client_conn:
        for queue in (requests, replies):
            queue(client_conn.default_channel).declare()
        server_producer = Producer(server_conn)

        def echo(body, message):
            server_producer.publish(body, exchange="", routing_key=replies.name,
                                    delivery_mode=1)
            message.ack()

        def serve():
            with Consumer(server_conn, [requests], callbacks=[echo]):
                while not stop.is_set():
                    try:
                        server_conn.drain_events(timeout=0.5)
                    except TimeoutError:
                        pass

        server = eventlet.spawn(serve)
        got = []
        latencies = []
        producer = Producer(client_conn)
        calls += 1  # the first call (connecting, LISTEN) is not counted
        with Consumer(client_conn, [replies], callbacks=[lambda b, m: (got.append(b), m.ack())]):
            for n in range(calls):
                started = time.perf_counter()
                producer.publish(n, exchange="", routing_key=requests.name, delivery_mode=1)
                while n not in got:
                    client_conn.drain_events(timeout=30)
                if n:
                    latencies.append(time.perf_counter() - started)
        stop.set()
        server.wait()
    return statistics.median(latencies) * 1000


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--sqla-calls", type=int, default=20)
    parser.add_argument("--idle", type=float, default=10.0)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="linectl-bench-pg-") as tmp:
        pg = EmbeddedPostgres(Path(tmp) / "pg")  # durable settings, as in production
        db_url = pg.start()
        try:
            upgrade(db_url)
            pgsql = "pgsql://" + db_url.split("://", 1)[1]
            sqla_db = f"bench_sqla_{uuid.uuid4().hex[:6]}"
            admin = psycopg2.connect(db_url)
            admin.autocommit = True
            admin.cursor().execute(f'CREATE DATABASE "{sqla_db}"')
            admin.close()
            sqla = "sqla+postgresql+psycopg2://" + db_url.split("://", 1)[1].rsplit("/", 1)[0] \
                + "/" + sqla_db

            results = {"pgsql://": nameko_figures(pgsql, args.calls, args.idle)}
            if rabbit_answers():
                results["RabbitMQ"] = nameko_figures(RABBIT, args.calls, args.idle)
            echo_pgsql = kombu_echo_p50(pgsql, args.sqla_calls)
            echo_sqla = kombu_echo_p50(sqla, args.sqla_calls)
        finally:
            pg.stop()

    print(f"\nnameko 2.14.1 RPC, {args.calls} sequential calls; throughput with N callers;"
          f" idle CPU over {args.idle:.0f} s (% of one core)")
    columns = [("p50 ms", "p50", "{:.2f}"), ("p99 ms", "p99", "{:.2f}"),
               ("calls/s @10", "tput10", "{:.0f}"), ("calls/s @50", "tput50", "{:.0f}"),
               ("idle svc %", "idle_service", "{:.2f}"), ("idle caller %", "idle_caller", "{:.2f}")]
    print(f"{'transport':<12}" + "".join(f"{title:>15}" for title, _, _ in columns))
    for name, figures in results.items():
        print(f"{name:<12}" + "".join(f"{fmt.format(figures[key]):>15}" for _, key, fmt in columns))

    print(f"\nkombu request/reply echo p50 ({args.sqla_calls} calls; sqlalchemy transport at its"
          f" default 1 s polling): pgsql:// {echo_pgsql:.2f} ms, sqlalchemy {echo_sqla:.1f} ms")

    print("\nratios vs targets")
    ours = results["pgsql://"]
    rabbit = results.get("RabbitMQ")
    if rabbit:
        ratio = ours["p50"] / rabbit["p50"]
        print(f"  p50 / RabbitMQ p50          = {ratio:.2f}x   (target <= 1.3x)"
              f"  {'OK' if ratio <= 1.3 else 'MISSED'}")
        for callers, target in ((10, None), (50, 0.6)):
            share = ours[f"tput{callers}"] / rabbit[f"tput{callers}"]
            verdict = "" if target is None else (
                f"(target >= {target:.0%})  {'OK' if share >= target else 'MISSED'}")
            print(f"  throughput @{callers:<2} / RabbitMQ  = {share:.0%}    {verdict}")
    else:
        print("  RabbitMQ does not answer on 127.0.0.1:5672: no RabbitMQ ratios")
    speedup = echo_sqla / echo_pgsql
    print(f"  sqlalchemy p50 / pgsql p50  = {speedup:.0f}x   (target >= 100x)"
          f"  {'OK' if speedup >= 100 else 'MISSED'}")


if __name__ == "__main__":
    main()
