"""The gateway under load, against ``linectl up`` (embedded PostgreSQL,
pgsql://, the simulator at speed 20, one gateway worker so its figures are one
process's), with the reference beside each figure:

* 1,000 websockets open, each receiving every event of a running order;
  event → frame latency at the clients (reference: the same events at a bare
  kombu consumer of ``line_events`` in this process, the relay without the
  gateway);
* REST reads (``GET /api/work-orders``) and commands (``POST /api/work-orders``)
  at a steady rate while they are open, p50/p99 (reference: the same on the
  same running line with no websocket open);
* the gateway worker's memory per open socket;
* a client flooding 64 MiB of messages and a stalled reader: memory before,
  during and after;
* a handshake over the cap; ``/readyz`` and a command after ``kill -9`` of the
  line_controller.

    python tests/bench/bench_gateway_load.py [--clients 1000] [--seconds 20]

The websocket clients are raw sockets on one selector thread in this process
(a thread per client here would measure this process, not the gateway). They
share the machine's two cores with the whole stack: figures are indicative.
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench.raw_websockets import Readers, handshake, masked  # noqa: E402
from tests.ops.stack import Stack  # noqa: E402


def pct(values, p):
    values = sorted(values)
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def rss_mib(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Relay:
    """The reference: a bare kombu consumer of line_events (what the gateway's relay is)."""

    def __init__(self, amqp_uri: str):
        from gateway.relay import EventRelay

        self.arrivals: dict[int, float] = {}
        self.relay = EventRelay(amqp_uri)
        self.relay.add_listener(self)
        self.relay.start()

    def on_frames(self, frames):
        now = time.time()
        for f in frames:
            self.arrivals[f["seq"]] = now

    def on_resync(self):
        pass


def event_times(base: str, token: str, after: int) -> dict[int, float]:
    """Each logged event's ``at`` (the loop's commit time), from ``/api/events``."""
    out, cursor = {}, after
    while True:
        r = requests.get(f"{base}/api/events?after={cursor}&limit=500",
                         headers={"Authorization": f"Bearer {token}"}, timeout=30).json()
        for item in r["items"]:
            out[item["seq"]] = datetime.fromisoformat(item["at"].replace("Z", "+00:00")).timestamp()
        if len(r["items"]) < 500:
            return out
        cursor = r["items"][-1]["seq"]


def fanout_quantiles(base: str) -> tuple[float, float]:
    """p50 and p99 of ``linectl_websocket_fanout_seconds`` (bucket upper bounds)."""
    buckets = []
    for line in requests.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith("linectl_websocket_fanout_seconds_bucket"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), float(line.split()[-1])))
    total = buckets[-1][1] if buckets else 0
    def q(p):
        return next((le for le, n in buckets if total and n >= p * total), float("nan"))
    return q(0.5), q(0.99)


def steady_rest(base: str, token: str, seconds: float, reads_per_s: float, commands_per_s: float):
    """Reads and commands at a steady rate from a few threads; latencies in seconds."""
    auth = {"Authorization": f"Bearer {token}"}
    reads, commands, errors = [], [], []
    stop = time.monotonic() + seconds

    def pace(rate, call, into):
        session = requests.Session()
        interval = 1.0 / rate
        next_at = time.monotonic()
        while next_at < stop:
            time.sleep(max(0.0, next_at - time.monotonic()))
            t0 = time.perf_counter()
            try:
                r = call(session)
                (into if r.status_code < 500 else errors).append(time.perf_counter() - t0)
            except requests.RequestException:
                errors.append(time.perf_counter() - t0)
            next_at += interval

    def read(s):
        return s.get(base + "/api/work-orders?limit=50", headers=auth, timeout=10)

    def command(s):
        return s.post(base + "/api/work-orders", json={"productId": "BRACKET-A", "quantity": 1},
                      headers=auth, timeout=10)

    threads = [threading.Thread(target=pace, args=(reads_per_s / 4, read, reads)) for _ in range(4)]
    threads.append(threading.Thread(target=pace, args=(commands_per_s, command, commands)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return reads, commands, errors


def row(name, value, ref=None, unit="", target=""):
    ratio = f"{value / ref:7.2f}x" if ref else "       -"
    ref_s = f"{ref:10.1f}" if ref is not None else "         -"
    print(f"{name:<52} {value:10.1f} {ref_s} {ratio}  {unit:<6} {target}", flush=True)


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--reads-per-second", type=float, default=20.0)
    parser.add_argument("--commands-per-second", type=float, default=2.0)
    return parser.parse_args()


class Bench:
    """The stack under test, as each measure needs it: its base URL and port, an
    operator's token, the gateway worker's pid, the broker URI of the bare relay."""

    def __init__(self, stack: Stack, args):
        self.stack, self.args = stack, args
        self.token = stack.token("operator")
        self.auth = {"Authorization": f"Bearer {self.token}"}
        gateway = stack.process("gateway")
        self.worker = int(Path(f"/proc/{gateway}/task/{gateway}/children").read_text().split()[0])
        amqp_uri = "pgsql://" + stack.output().split("database: postgresql://", 1)[1].split()[0]
        self.amqp_uri = amqp_uri.replace("***", (stack.data_dir / "pg.password").read_text().strip())

    def handshake(self, **kwargs):
        return handshake(self.stack.http_port, self.token, **kwargs)

    def steady_rest(self):
        return steady_rest(self.stack.base, self.token, self.args.seconds, self.args.reads_per_second,
                           self.args.commands_per_second)


def open_sockets(bench: Bench) -> tuple[Readers, float]:
    """The clients' websockets, opened one after the other; how long that took."""
    readers = Readers()
    t0 = time.monotonic()
    for _ in range(bench.args.clients):
        sock = bench.handshake()
        if isinstance(sock, int):
            raise SystemExit(f"handshake refused with {sock}")
        readers.add(sock)
    opened = time.monotonic() - t0
    readers.start()
    return readers, opened


def measure_open_sockets(bench: Bench) -> Readers:
    """A running order; REST, commands and events with the sockets open, against
    the reference: REST with no websocket open, the events at a bare relay."""
    args, stack, worker = bench.args, bench.stack, bench.worker
    requests.post(stack.base + "/api/work-orders", json={"productId": "SHAFT-B", "quantity": 50},
                  headers=bench.auth, timeout=10)
    ref_reads, ref_cmds, _ = bench.steady_rest()
    rss_idle = rss_mib(worker)

    readers, opened = open_sockets(bench)
    relay = Relay(bench.amqp_uri)
    time.sleep(1.0)
    rss_open = rss_mib(worker)
    reads, cmds, errors = bench.steady_rest()
    time.sleep(2.0)  # the last frames on their way
    after = min(readers.arrivals) - 1 if readers.arrivals else 0
    at = event_times(stack.base, bench.token, after)
    frame_lat = [t - at[seq] for seq, ts in readers.arrivals.items() if seq in at for t in ts]
    relay_lat = [t - at[seq] for seq, t in relay.arrivals.items() if seq in at]
    complete = sum(1 for seq in relay.arrivals if len(readers.arrivals.get(seq, ())) == args.clients)
    relay.relay.stop()

    row("REST read p50 (ms), sockets open vs none", pct(reads, 50) * 1e3, pct(ref_reads, 50) * 1e3, "ms")
    row("REST read p99 (ms), sockets open vs none", pct(reads, 99) * 1e3, pct(ref_reads, 99) * 1e3, "ms",
        "< 200 ms")
    row("command p50 (ms), sockets open vs none", pct(cmds, 50) * 1e3, pct(ref_cmds, 50) * 1e3, "ms")
    row("command p99 (ms), sockets open vs none", pct(cmds, 99) * 1e3, pct(ref_cmds, 99) * 1e3, "ms",
        "< 200 ms")
    row("REST answers >= 500 or failed while open", len(errors), None, "")
    row("event -> frame p50 (ms) vs bare relay", pct(frame_lat, 50) * 1e3, pct(relay_lat, 50) * 1e3, "ms")
    row("event -> frame p99 (ms) vs bare relay", pct(frame_lat, 99) * 1e3, pct(relay_lat, 99) * 1e3, "ms",
        "< 100 ms")
    fanout = fanout_quantiles(stack.base)
    row("gateway fan-out to all sockets p50 (ms, histogram)", fanout[0] * 1e3, None, "ms",
        "relay -> every socket's send, inside the gateway")
    row("gateway fan-out to all sockets p99 (ms, histogram)", fanout[1] * 1e3, None, "ms")
    row("events seen by every client / by the relay", complete, len(relay.arrivals), "")
    row(f"{args.clients} handshakes (s)", opened, None, "s")
    row("worker memory per open socket (KiB)", (rss_open - rss_idle) * 1024 / args.clients, None, "KiB")
    print(f"  (worker RSS {rss_idle:.1f} MiB idle, {rss_open:.1f} MiB with {args.clients} open)")
    return readers


def measure_over_the_cap(bench: Bench) -> None:
    """A handshake over the cap."""
    extra = [bench.handshake() for _ in range(10)]
    t0 = time.monotonic()
    refused = bench.handshake()
    row("handshake over the cap: status, in ms", (time.monotonic() - t0) * 1e3, None, "ms",
        f"HTTP {refused} (503 at once)")
    for s in extra:
        if not isinstance(s, int):
            s.close()


def measure_a_flood(bench: Bench) -> None:
    """A client flooding 64 MiB of messages."""
    worker = bench.worker
    flood = bench.handshake()
    while isinstance(flood, int):  # the slots the extra sockets held are freed as they close
        time.sleep(0.1)
        flood = bench.handshake()
    before = rss_mib(worker)
    peak = before
    chunk = masked(0x1, b"f" * 4000) * 64
    sent, t0 = 0, time.monotonic()
    try:
        while sent < 64 * 1024 * 1024:  # 64 MiB of client messages, or until cut off
            flood.sendall(chunk)
            sent += len(chunk)
            peak = max(peak, rss_mib(worker))
        flood.sendall(masked(0x9, b"end"))
        flood.settimeout(30)
        while (data := flood.recv(65536)) and b"end" not in data:
            pass
    except OSError:
        pass  # cut off
    cut_after = time.monotonic() - t0
    during = max(peak, rss_mib(worker))
    flood.close()
    time.sleep(1.0)
    row("64 MiB flood: worker growth during (MiB)", during - before, 64, "MiB", "< 16 MiB")
    row("64 MiB flood: worker growth after close (MiB)", rss_mib(worker) - before, 64, "MiB", "freed")
    row("64 MiB flood: MiB the client wrote (read, dropped)", sent / 2**20, 64, "MiB",
        f"connection ended {cut_after:.1f} s after the flood began")


def measure_a_stalled_reader(bench: Bench) -> None:
    """A client that asks for the whole log and never reads it."""
    worker = bench.worker
    stalled = bench.handshake(after=0, rcvbuf=4096)
    before = rss_mib(worker)
    t0 = time.monotonic()
    watch = select.poll()
    watch.register(stalled, select.POLLHUP | select.POLLERR)  # a reset, seen without reading
    peak = before
    while not watch.poll(200) and time.monotonic() - t0 < 120:
        peak = max(peak, rss_mib(worker))
    cut = time.monotonic() - t0
    row("stalled reader: reset by the gateway after (s)", cut, None, "s",
        "no progress 10 s + 10 s to read the close (or 2 unanswered pings)")
    row("stalled reader: worker growth during / after (MiB)", peak - before, None, "MiB",
        f"after: {rss_mib(worker) - before:.1f} MiB")
    stalled.close()


def measure_a_killed_controller(bench: Bench) -> None:
    """Readiness and commands after kill -9 of the line_controller."""
    stack = bench.stack
    os.kill(stack.process("line_controller"), signal.SIGKILL)
    t0 = time.monotonic()
    while requests.get(stack.base + "/readyz", timeout=10).status_code != 503:
        pass
    row("/readyz 503 after kill -9 of line_controller (ms)", (time.monotonic() - t0) * 1e3, None, "ms",
        "< 1000 ms")
    t0 = time.monotonic()
    r = requests.post(stack.base + "/api/work-orders", json={"productId": "BRACKET-A", "quantity": 1},
                      headers=bench.auth, timeout=30)
    row("command while it is gone (ms)", (time.monotonic() - t0) * 1e3, None, "ms",
        f"HTTP {r.status_code} (503 within ~1 s)")


def main():
    args = parse_args()
    # A bench stopped by timeout or Ctrl-C still stops its stack (the finally below).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.TemporaryDirectory()
    stack = Stack(Path(tmp.name) / "data", {}, sim_speed=20.0, extra_env={
        "LINECTL_GATEWAY_WORKERS": "1", "LINECTL_WS_MAX_CLIENTS": str(args.clients + 10),
        "LINECTL_LOG_LEVEL": "WARNING"})
    try:
        stack.up()
        stack.wait_line("linectl: ready", timeout=180)
        bench = Bench(stack, args)
        print(f"stack up; gateway worker pid {bench.worker}; {args.clients} websocket clients\n")
        print(f"{'measure':<52} {'linectl':>10} {'reference':>10} {'ratio':>8}  unit   target")
        readers = measure_open_sockets(bench)
        measure_over_the_cap(bench)
        measure_a_flood(bench)
        measure_a_stalled_reader(bench)
        readers.stop()
        measure_a_killed_controller(bench)
    finally:
        stack.cleanup()
        tmp.cleanup()


if __name__ == "__main__":
    main()
