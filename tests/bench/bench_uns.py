"""The northbound publisher's latency, drain and cost (issue 52; docs/uns.md, "Cost").

    .venv/bin/python tests/bench/bench_uns.py [--lines 1,8] [--pieces 8] [--speed 50]
        [--backlog-minutes 10] [--backlog-line-pieces 2000] [--idle-seconds 20]

One embedded PostgreSQL (``track_commit_timestamp`` on) and one mosquitto; for
each plant size in ``--lines`` a fresh database and ``linectl up`` of a plant of
that many lines (copies of deploy/lines/cell-a.yaml) on ``pgsql://``, with
``LINECTL_MQTT_URL`` set: each line's sim, hardware and line_controller, the
gateway and the publisher (``uns``). In this process: a Sparkplug subscriber
(paho, a persistent session) and one websocket per line (``/ws?line=``).

* **Latency**, every event of one order of ``--pieces`` per line (all lines at
  once): from the commit of its loop transaction (``pg_xact_commit_timestamp``
  of its ``event_log`` row) to the receipt of the NDATA carrying its
  ``Line/EventSeq``, and of the last DDATA of that transaction; beside it, the
  same events' frames at the websocket.
* **What the publisher costs PostgreSQL**: the CPU of the server processes
  serving the publisher's connections (found by their client ports), per
  line-minute, while the orders run and while the lines idle; and the
  publisher process's own CPU.
* **Backlog** (the first plant size, one line busy): the broker killed for
  ``--backlog-minutes`` while the line runs an order of ``--backlog-line-pieces``,
  then started again: the drain rate of the historical backlog (events/s, from
  the new NBIRTH to the last historical ``Line/EventSeq``) and the latency of
  the live events published while it drains.

Not in the suite (``make bench`` runs it). The bench's subscriber and websockets
share the machine with the plant: figures are indicative.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
import psutil
import websocket
import yaml
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from services.uns.proto import sparkplug_b_pb2 as pb  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from tests.ops.stack import Stack  # noqa: E402
from tests.support.mosquitto import Broker  # noqa: E402

TEMPLATE = ROOT / "deploy" / "lines" / "cell-a.yaml"
PRODUCT = "BRACKET-A"
GROUP = "bench"
EVENT_SEQ = "Line/EventSeq"


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1000:.1f}"


# -- the plant ---------------------------------------------------------------------------------

def write_plant(directory: Path, count: int) -> tuple[Path, list[str]]:
    directory.mkdir(parents=True)
    template = yaml.safe_load(TEMPLATE.read_text())
    ids = [f"cell-{n}" for n in range(1, count + 1)]
    for line_id in ids:
        layout = {**template, "line": {**template["line"], "id": line_id, "name": f"Bench {line_id}"}}
        (directory / f"{line_id}.yaml").write_text(yaml.safe_dump(layout, sort_keys=False))
    plant = {"plant": {"id": f"bench-{count}", "name": f"Bench plant of {count}"},
             "lines": [{"layout": f"{line_id}.yaml", "plc": "sim"} for line_id in ids]}
    plant_file = directory / "plant.yaml"
    plant_file.write_text(yaml.safe_dump(plant, sort_keys=False))
    return plant_file, ids


def fresh_database(base_url: str, name: str) -> str:
    engine = make_engine(base_url, pool_size=1)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name}"))
        conn.execute(text(f"CREATE DATABASE {name}"))
    engine.dispose()
    return base_url.rsplit("/", 1)[0] + f"/{name}"


class Plant:
    """``linectl up`` of a plant on the bench's database and broker; HTTP as an operator."""

    def __init__(self, stack: Stack, ids: list[str], url: str):
        self.stack, self.ids, self.url = stack, ids, url
        self.engine = make_engine(url, pool_size=2)
        self.token = stack.token("operator")
        with self.engine.connect() as conn:
            self.schemas = dict(conn.execute(text("SELECT id, schema_name FROM plant_line")).all())

    def newest(self) -> dict[str, int]:
        with self.engine.connect() as conn:
            return {i: conn.execute(text(f'SELECT coalesce(max(seq), 0) FROM "{self.schemas[i]}".event_log')).scalar()
                    for i in self.ids}

    def commits(self, line_id: str, after: int) -> dict[int, float]:
        """Each event's transaction's commit time (epoch seconds), by seq."""
        with self.engine.connect() as conn:
            return dict(conn.execute(text(
                f'SELECT seq, EXTRACT(EPOCH FROM pg_xact_commit_timestamp(xmin))::float8 FROM "{self.schemas[line_id]}"'
                ".event_log WHERE seq > :after"), {"after": after}).all())

    def order(self, line_id: str, quantity: int) -> int:
        code, order = self.stack.request("POST", f"/api/lines/{line_id}/work-orders",
                                         {"productId": PRODUCT, "quantity": quantity}, self.token, timeout=30)
        assert code == 201, order
        code, body = self.stack.request("POST", f"/api/lines/{line_id}/work-orders/{order['id']}/start", {},
                                        self.token, timeout=30)
        assert code == 200, body
        return order["id"]

    def completed(self, orders: dict[str, int]) -> bool:
        return all(self.stack.get(f"/api/lines/{i}/work-orders/{o}", self.token, timeout=30)[1].get("status")
                   == "COMPLETED" for i, o in orders.items())


# -- what arrives --------------------------------------------------------------------------------

class SparkplugReceipts:
    """Every Sparkplug message of the group as it arrives: per node, in order,
    ``(time, kind, [(EventSeq, historical)])``."""

    def __init__(self, broker: Broker, client_id: str):
        self.lock = threading.Lock()
        self.messages: dict[str, list[tuple[float, str, list[tuple[int, bool]]]]] = {}
        self.alias: dict[str, int] = {}
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=False)
        self.client.reconnect_delay_set(0.2, 1)
        self.client.on_connect = lambda c, *_a: c.subscribe(f"spBv1.0/{GROUP}/#", qos=1)
        self.client.on_message = self._message
        self.client.connect("127.0.0.1", broker.port, keepalive=5)
        self.client.loop_start()

    def _message(self, _c, _u, msg) -> None:
        at = time.time()
        levels = msg.topic.split("/")
        kind, node = levels[2], levels[3]
        if kind in ("NCMD", "DCMD"):
            return
        payload = pb.Payload.FromString(msg.payload)
        if kind == "NBIRTH":
            self.alias[node] = next(m.alias for m in payload.metrics if m.name == EVENT_SEQ)
        seqs = [(m.long_value, m.is_historical) for m in payload.metrics
                if kind == "NDATA" and (m.name == EVENT_SEQ or (not m.name and m.alias == self.alias.get(node)))]
        with self.lock:
            self.messages.setdefault(node, []).append((at, kind, seqs))

    def of(self, node: str) -> list:
        with self.lock:
            return list(self.messages.get(node, []))

    def seen(self, node: str) -> set[int]:
        return {s for _t, _k, seqs in self.of(node) for s, _h in seqs}

    def live_receipts(self, node: str, since: float = 0.0) -> tuple[dict[int, float], dict[int, float]]:
        """Per live seq: when its NDATA arrived, and when its transaction's last message did
        (the DDATAs that follow the NDATA, up to the node's next NDATA or birth)."""
        ndata, whole = {}, {}
        msgs = [m for m in self.of(node) if m[0] >= since]
        for i, (at, kind, seqs) in enumerate(msgs):
            live = [s for s, historical in seqs if not historical]
            if kind != "NDATA" or not live:
                continue
            end = i
            while end + 1 < len(msgs) and msgs[end + 1][1] == "DDATA":
                end += 1
            for s in live:
                ndata.setdefault(s, at)
                whole.setdefault(s, msgs[end][0])
        return ndata, whole

    def stop(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


class WebsocketReceipts:
    """Each line's ``/ws`` stream: when each seq's frame arrived."""

    def __init__(self, stack: Stack, token: str, ids: list[str]):
        self.arrived: dict[str, dict[int, float]] = {i: {} for i in ids}
        self.sockets = []
        base = stack.base.replace("http://", "ws://")
        for line_id in ids:
            ws = websocket.create_connection(f"{base}/ws?line={line_id}", header=[f"Authorization: Bearer {token}"],
                                             timeout=600)
            self.sockets.append(ws)
            threading.Thread(target=self._read, args=(ws, self.arrived[line_id]), daemon=True).start()

    @staticmethod
    def _read(ws, arrived: dict[int, float]) -> None:
        try:
            while True:
                frame = json.loads(ws.recv())
                if isinstance(frame.get("seq"), int):
                    arrived.setdefault(frame["seq"], time.time())
        except Exception:  # noqa: BLE001 - closed at the end
            return

    def stop(self) -> None:
        for ws in self.sockets:
            try:
                ws.close()
            except Exception:  # noqa: BLE001
                pass


# -- what it costs ----------------------------------------------------------------------------

class PublisherCost:
    """The CPU of the PostgreSQL backends serving the publisher (its client ports), and of
    the publisher process, sampled every half second (a backend that ends keeps its last sample)."""

    def __init__(self, stack: Stack, engine, pg_port: int):
        self.stack, self.engine, self.pg_port = stack, engine, pg_port
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _sample(self) -> None:
        pid = self.stack.process("uns")
        if pid is None:
            return
        proc = psutil.Process(pid)
        ports = [c.laddr.port for c in proc.net_connections("tcp") if c.raddr and c.raddr.port == self.pg_port]
        with self.engine.connect() as conn:
            backends = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(:p)"),
                                    {"p": ports}).scalars().all()
        for backend in [*backends, -pid]:  # -pid: the publisher process itself
            try:
                t = psutil.Process(abs(backend)).cpu_times()
            except psutil.NoSuchProcess:
                continue
            self.first.setdefault(backend, t.user + t.system)
            self.last[backend] = t.user + t.system

    def _run(self) -> None:
        while not self.stopping.wait(0.5):
            try:
                self._sample()
            except Exception:  # noqa: BLE001 - a process gone between two looks
                pass

    def mark(self) -> dict[str, float]:
        """CPU seconds so far: PostgreSQL's for the publisher, and the publisher's own."""
        self._sample()
        pg = sum(self.last[b] - self.first[b] for b in self.last if b > 0)
        own = sum(self.last[b] - self.first[b] for b in self.last if b < 0)
        return {"pg": pg, "uns": own, "at": time.monotonic()}

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(5)


def per_line_minute(before: dict, after: dict, lines: int) -> tuple[float, float]:
    minutes = (after["at"] - before["at"]) / 60 * lines
    return (after["pg"] - before["pg"]) / minutes, (after["uns"] - before["uns"]) / minutes


# -- the runs ------------------------------------------------------------------------------------

def latency_run(plant: Plant, host: SparkplugReceipts, args, count: int) -> dict:
    ws = WebsocketReceipts(plant.stack, plant.token, plant.ids)
    cost = PublisherCost(plant.stack, plant.engine, args.pg_port)
    try:
        time.sleep(2)  # the websockets' and the cost sampler's first look (a start, not a synchronisation)
        idle_start = cost.mark()
        time.sleep(args.idle_seconds)
        idle_end = cost.mark()
        idle = per_line_minute(idle_start, idle_end, count)
        if args.verbose:
            print(f"  idle: {idle_start} -> {idle_end}; {len(cost.last)} processes", flush=True)
        start = plant.newest()
        busy_start = cost.mark()
        orders = {i: plant.order(i, args.pieces) for i in plant.ids}
        deadline = time.monotonic() + 120 + args.pieces * 40 * count
        while not plant.completed(orders):
            if time.monotonic() > deadline:
                raise SystemExit("the orders did not complete")
            time.sleep(0.5)
        busy_end = cost.mark()
        busy = per_line_minute(busy_start, busy_end, count)
        end = plant.newest()
        deadline = time.monotonic() + 60
        while any(not set(range(start[i] + 1, end[i] + 1)) <= host.seen(i) for i in plant.ids) or \
                any(not set(range(start[i] + 1, end[i] + 1)) <= set(ws.arrived[i]) for i in plant.ids):
            if time.monotonic() > deadline:
                raise SystemExit("not every event arrived at the subscriber and the websockets")
            time.sleep(0.2)
        ndata, whole, frames, events = [], [], [], 0
        for i in plant.ids:
            commits = plant.commits(i, start[i])
            at_ndata, at_whole = host.live_receipts(i)
            for seq in range(start[i] + 1, end[i] + 1):
                events += 1
                ndata.append(at_ndata[seq] - commits[seq])
                whole.append(at_whole[seq] - commits[seq])
                frames.append(ws.arrived[i][seq] - commits[seq])
        line_minutes = (busy_end["at"] - busy_start["at"]) / 60 * count
        return {"lines": count, "events": events, "ndata": ndata, "whole": whole, "ws": frames,
                "idle": idle, "busy": busy, "pace": events / line_minutes,
                "per_1000": ((busy_end["pg"] - busy_start["pg"]) / events * 1000,
                             (busy_end["uns"] - busy_start["uns"]) / events * 1000)}
    finally:
        cost.stop()
        ws.stop()


def backlog_run(plant: Plant, host: SparkplugReceipts, broker: Broker, args) -> dict:
    line_id = plant.ids[0]
    plant.order(line_id, args.backlog_line_pieces)  # not finished: the plant stops with the run
    time.sleep(5)  # the line busy (a moment of the run, not a synchronisation)
    broker.kill()
    before = plant.newest()[line_id]
    print(f"  broker away for {args.backlog_minutes:g} min while {line_id} runs", flush=True)
    time.sleep(args.backlog_minutes * 60)
    backlog_to = plant.newest()[line_id]
    restarted = time.time()
    broker.start()
    deadline = time.monotonic() + 120 + (backlog_to - before) / 100
    while True:
        msgs = host.of(line_id)
        births = [at for at, kind, _s in msgs if kind == "NBIRTH" and at >= restarted]
        historical = [(at, s) for at, _k, seqs in msgs if at >= restarted for s, h in seqs if h]
        if births and {s for _a, s in historical} >= set(range(before + 1, backlog_to + 1)):
            break
        if time.monotonic() > deadline:
            missing = sorted(set(range(before + 1, backlog_to + 1)) - {s for _a, s in historical})
            raise SystemExit(f"the backlog ({before}, {backlog_to}] did not drain: {len(births)} births since the"
                             f" broker's restart, {len(historical)} historical seqs, missing {missing[:10]}…"
                             f" ({len(missing)}); last messages: {[(k, s) for _a, k, s in msgs[-5:]]}")
        time.sleep(0.2)
    born, drained = births[0], max(at for at, _s in historical)
    commits = plant.commits(line_id, before)
    at_ndata, _whole = host.live_receipts(line_id, since=born)
    live = [at_ndata[s] - commits[s] for s in at_ndata if s in commits and at_ndata[s] <= drained]
    return {"events": len({s for _a, s in historical}), "seconds": drained - born,
            "rate": len({s for _a, s in historical}) / max(drained - born, 1e-3), "live": live,
            "away": args.backlog_minutes}


def run_plant(server: EmbeddedPostgres, base_url: str, broker: Broker, count: int, args, tmp: Path) -> dict:
    plant_file, ids = write_plant(tmp / f"plant-{count}", count)
    url = fresh_database(base_url, f"uns_{count}")
    stack = Stack(tmp / f"data-{count}", {}, sim_speed=args.speed, lines=count,
                  extra_env={"LINECTL_PLANT_FILE": str(plant_file), "LINECTL_MQTT_URL": broker.url,
                             "LINECTL_SPARKPLUG_GROUP": GROUP, "LINECTL_LOG_LEVEL": "WARNING"})
    stack.env["LINECTL_DATABASE_URL"] = url
    host = SparkplugReceipts(broker, f"bench-host-{count}")
    try:
        stack.up().wait_line("linectl: ready", 120 + 30 * count)
        plant = Plant(stack, ids, url)
        deadline = time.monotonic() + 60
        while any(not any(k == "NBIRTH" for _a, k, _s in host.of(i)) for i in ids):
            if time.monotonic() > deadline:
                raise SystemExit("no births")
            time.sleep(0.2)
        result = latency_run(plant, host, args, count)
        if count == args.backlog_size and args.backlog_minutes > 0:
            result["backlog"] = backlog_run(plant, host, broker, args)
        plant.engine.dispose()
        return result
    except BaseException:
        print("\n".join(stack.lines[-40:]), file=sys.stderr)
        raise
    finally:
        host.stop()
        stack.cleanup()


def report(results: list[dict]) -> None:
    print("\n| lines | events (per line-minute) | commit → NDATA p50 / p99 (ms) | → last DDATA p50 / p99 |"
          " → websocket frame p50 / p99 | PostgreSQL CPU for the publisher, busy / idle (ms per line-minute;"
          " per 1000 events) | the publisher's own CPU, busy / idle (same) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['lines']} | {r['events']} ({r['pace']:.0f}) | {ms(pct(r['ndata'], 50))} / "
              f"{ms(pct(r['ndata'], 99))} | {ms(pct(r['whole'], 50))} / {ms(pct(r['whole'], 99))} | "
              f"{ms(pct(r['ws'], 50))} / {ms(pct(r['ws'], 99))} | {r['busy'][0] * 1000:.0f} / "
              f"{r['idle'][0] * 1000:.0f}; {r['per_1000'][0] * 1000:.0f} | {r['busy'][1] * 1000:.0f} / "
              f"{r['idle'][1] * 1000:.0f}; {r['per_1000'][1] * 1000:.0f} |")
    for r in results:
        b = r.get("backlog")
        if b:
            print(f"\nbacklog: broker away {b['away']:g} min on one busy line: {b['events']} events drained in "
                  f"{b['seconds']:.1f} s = {b['rate']:.0f} events/s; live events while it drained: {len(b['live'])},"
                  f" NDATA p50 {ms(pct(b['live'], 50))} ms, p99 {ms(pct(b['live'], 99))} ms,"
                  f" max {ms(max(b['live'], default=None))} ms")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", default="1,8", help="plant sizes, in turn")
    ap.add_argument("--pieces", type=int, default=8, help="pieces in every line's order (latency runs)")
    ap.add_argument("--speed", type=float, default=50.0, help="every simulator's speed")
    ap.add_argument("--idle-seconds", type=float, default=20.0, help="the idle window measured before the orders")
    ap.add_argument("--backlog-minutes", type=float, default=10.0,
                    help="how long the broker is away while one line runs (0: no backlog run)")
    ap.add_argument("--backlog-line-pieces", type=int, default=2000, help="the busy line's order (left unfinished)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    sizes = [int(n) for n in args.lines.split(",") if n]
    args.backlog_size = sizes[0]
    # SIGTERM (e.g. `timeout`) ends the run through the cleanup below, not around it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results = []
    with tempfile.TemporaryDirectory(prefix="linectl-bench-uns-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pg")
        base = server.start()
        broker = Broker(Path(tmp) / "mosquitto", persistent=True).start()
        try:
            engine = make_engine(base, pool_size=1)
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("ALTER SYSTEM SET track_commit_timestamp = on"))
            engine.dispose()
            server.restart()  # track_commit_timestamp takes a restart
            args.pg_port = server.port
            for count in sizes:
                print(f"== {count} line(s)", flush=True)
                results.append(run_plant(server, base, broker, count, args, Path(tmp)))
                report(results[-1:])
        finally:
            broker.stop()
            server.stop()
    print("\n== all")
    report(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
