"""A whole work order through the whole stack, beside the raw event loop.

    .venv/bin/python tests/bench/bench_flow.py [--pieces 200] [--product BRACKET-A] [--speed 100000]
        [--protocols modbus,opcua]

The stack: the Modbus line simulator in-process at (near) zero action time
(``--speed``: a 14 s swap takes 0.14 ms), the real hardware service and the
real line_controller (scheduler wired) in nameko containers, an embedded
PostgreSQL (fsync on). It times one order of ``--pieces`` from StartOrder to
COMPLETED and the last piece out of the cell, and prints pieces per minute.

Beside it, in the same run, the reference: the raw event loop of
``bench_event_loop.py`` (the same loop, messages handed to it in memory, no
scheduler, no transport, no hardware) on the same server. The per-piece
overhead is the whole stack's time per piece against what the loop messages
one piece needed would cost at the raw rate; their ratio is what the
scheduler rounds, the transport, the hardware service's polling (robot
handshake every 20 ms, PLC signals every 100 ms) and waiting add.

Transports, side by side in one run, each on its own fresh database:
``pgsql://`` on the bench database, and RabbitMQ on a private vhost
(``rabbitmqctl``) or at ``LINECTL_BENCH_AMQP_URI`` when one answers on
127.0.0.1:5672. The ratio of their pieces per minute is the transport's share
of the line's pace (issue 15: pgsql:// / RabbitMQ >= 0.8).

Field protocols, side by side in the same run (issue 26): the simulator over
Modbus (the hardware polls) and over OPC UA (signals by subscription), both on
``pgsql://``, each on its own fresh database.
"""

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nameko.containers import ServiceContainer  # noqa: E402
from nameko.standalone.rpc import ServiceRpcProxy  # noqa: E402
from sqlalchemy import text  # noqa: E402

from services.hardware.service import HardwareService  # noqa: E402
from services.hardware.sim.model import SimOptions  # noqa: E402
from services.hardware.sim.opcua_server import OpcUaLineSimulator  # noqa: E402
from services.hardware.sim.server import LineSimulator  # noqa: E402
from services.line_controller.dbstate import DBState  # noqa: E402
from services.line_controller.loop import EventLoop  # noqa: E402
from services.line_controller.service import LineControllerService  # noqa: E402
from services.stack.migrate import upgrade  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.db.embedded import EmbeddedPostgres  # noqa: E402
from shared.db.engine import make_engine  # noqa: E402
from shared.layout import load_layout  # noqa: E402
from tests.bench.bench_event_loop import bench_layout, run_loop, stage, stream  # noqa: E402
from tests.bench.bench_transport import rabbit_answers  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def transport(db_url: str, kind: str):
    """(uri, cleanup)."""
    if kind == "pgsql":
        return "pgsql://" + db_url.split("://", 1)[1], lambda: None
    if os.environ.get("LINECTL_BENCH_AMQP_URI"):
        return os.environ["LINECTL_BENCH_AMQP_URI"], lambda: None
    vhost = f"linectl-bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    for args in (["add_vhost", vhost], ["set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"]):
        subprocess.run(["rabbitmqctl", *args], check=True, capture_output=True, timeout=30)
    return (f"amqp://guest:guest@127.0.0.1:5672/{vhost}",
            lambda: subprocess.run(["rabbitmqctl", "delete_vhost", vhost], capture_output=True, timeout=30))


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        eventlet.sleep(0.02)


def whole_stack(url: str, pieces: int, product: str, speed: float, kind: str, protocol: str = "modbus") -> dict:
    engine = make_engine(url, pool_size=2)
    layout = load_layout(Settings().line_file)
    port = free_port()
    simulator = OpcUaLineSimulator if protocol == "opcua" else LineSimulator
    sim = simulator(layout, SimOptions(speed=speed, scrap_rate=0.05, seed=3, pallet_size=pieces + 8,
                                       pallet_seconds=1.0), "127.0.0.1", port).start()
    amqp, cleanup = transport(url, kind)
    address = f"opc.tcp://127.0.0.1:{port}" if protocol == "opcua" else f"127.0.0.1:{port}"
    config = {"AMQP_URI": amqp, "serializer": "json", "max_workers": 20, "LINECTL_DATABASE_URL": url,
              "LINECTL_PLC_ADDRESS": address}
    containers = [ServiceContainer(HardwareService, config), ServiceContainer(LineControllerService, config)]
    for c in containers:
        c.start()

    def scalar(sql, **params):
        with engine.connect() as c:
            return c.execute(text(sql), params).scalar()
    try:
        with ServiceRpcProxy("hardware", config, timeout=30) as hw, \
                ServiceRpcProxy("line_controller", config, timeout=60) as lc:
            wait_until(lambda: hw.plc_state()["connected"], 30, "the PLC")
            order = lc.command("CreateOrder", {"productId": product, "quantity": pieces}, "bench",
                               wait_seconds=30)["result"]
            messages_before = scalar("SELECT count(*) FROM loop_message")
            start = time.perf_counter()
            lc.command("StartOrder", {"workOrderId": order["id"]}, "bench", wait_seconds=30)
            wait_until(lambda: scalar("SELECT status FROM work_order WHERE id = :o", o=order["id"])
                       == "COMPLETED", 60 + pieces * 5, "the order")
            wait_until(lambda: scalar("SELECT count(*) FROM task WHERE status = 'RUNNING'") == 0, 60,
                       "the last piece out")
            elapsed = time.perf_counter() - start
            messages = scalar("SELECT count(*) FROM loop_message") - messages_before
            rounds = scalar("SELECT count(DISTINCT tx_id) FROM event_log WHERE message_id IS NULL")
            tasks = scalar("SELECT count(*) FROM task")
            scrapped = scalar("SELECT scrapped_qty FROM work_order WHERE id = :o", o=order["id"])
    finally:
        for c in containers:
            c.stop()
        sim.stop()
        cleanup()
        engine.dispose()
    return {"elapsed": elapsed, "messages": messages, "rounds": rounds, "tasks": tasks,
            "scrapped": scrapped, "transport": {"pgsql": "pgsql://", "amqp": "RabbitMQ"}[kind],
            "protocol": protocol}


def raw_loop(url: str, pieces: int) -> float:
    """Messages per second of the bare event loop (bench_event_loop's stream)."""
    engine = make_engine(url, pool_size=3)
    layout = bench_layout(pieces)
    with engine.begin() as conn:
        DBState(conn).sync_equipment(layout)
    msgs = stream(stage(engine, layout, pieces))
    loop = EventLoop(engine, layout)
    loop.start()
    try:
        return run_loop(loop, msgs)
    finally:
        loop.stop()
        engine.dispose()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pieces", type=int, default=200)
    ap.add_argument("--product", default="BRACKET-A")
    ap.add_argument("--speed", type=float, default=100000.0)
    ap.add_argument("--raw-pieces", type=int, default=500)
    ap.add_argument("--protocols", default="modbus,opcua", help="field protocols, each over pgsql://")
    args = ap.parse_args(argv)
    protocols = [p for p in args.protocols.split(",") if p]
    if not set(protocols) <= {"modbus", "opcua"}:
        raise SystemExit("--protocols: modbus and/or opcua")

    kinds = ["pgsql"] + (["amqp"] if rabbit_answers() or os.environ.get("LINECTL_BENCH_AMQP_URI")
                         else [])
    with tempfile.TemporaryDirectory(prefix="linectl-bench-") as tmp:
        server = EmbeddedPostgres(Path(tmp) / "pg")
        base = server.start()
        try:
            names = [f"flow_{kind}" for kind in kinds] + [f"flow_{p}" for p in protocols[1:]] + ["raw"]
            with make_engine(base, pool_size=1).connect().execution_options(
                    isolation_level="AUTOCOMMIT") as conn:
                for name in names:
                    conn.execute(text(f"CREATE DATABASE {name}"))
            urls = {name: base.rsplit("/", 1)[0] + f"/{name}" for name in names}
            for url in urls.values():
                upgrade(url)
            stacks = [whole_stack(urls[f"flow_{kind}"], args.pieces, args.product, args.speed, kind,
                                  protocols[0] if protocols else "modbus")
                      for kind in kinds]
            by_protocol = [whole_stack(urls[f"flow_{p}"], args.pieces, args.product, args.speed, "pgsql", p)
                           for p in protocols[1:]]
            raw_rate = raw_loop(urls["raw"], args.raw_pieces)
        finally:
            server.stop()

    print(f"flow benchmark: {args.pieces} × {args.product}, simulator speed {args.speed:g}, fsync on")
    print(f"{'transport':12}{'pieces/min':>12}{'ms/piece':>10}{'messages':>10}{'rounds':>8}"
          f"{'tasks':>7}{'scrapped':>10}{'raw loop pieces/min':>21}{'vs raw':>8}")
    rows = [(stack["transport"], stack) for stack in stacks] + \
           [("pgsql/" + stack["protocol"], stack) for stack in by_protocol]
    for label, stack in rows:
        per_piece = stack["elapsed"] / args.pieces
        raw_per_piece = stack["messages"] / args.pieces / raw_rate
        print(f"{label:12}{60 / per_piece:>12.1f}{per_piece * 1000:>10.1f}"
              f"{stack['messages']:>10}{stack['rounds']:>8}{stack['tasks']:>7}{stack['scrapped']:>10}"
              f"{60 / raw_per_piece:>21.0f}{raw_per_piece / per_piece:>8.3f}")
    if by_protocol:
        first = stacks[0]
        for stack in by_protocol:
            print(f"pieces/min, {stack['protocol']} / {first['protocol']} (both pgsql://) = "
                  f"{first['elapsed'] / stack['elapsed']:.2f}")
    if len(stacks) == 2:
        ratio = stacks[1]["elapsed"] / stacks[0]["elapsed"]
        print(f"\npieces/min, pgsql:// / RabbitMQ = {ratio:.2f}   (target >= 0.8)"
              f"  {'OK' if ratio >= 0.8 else 'MISSED'}")
    else:
        print("\nRabbitMQ does not answer on 127.0.0.1:5672: no ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
