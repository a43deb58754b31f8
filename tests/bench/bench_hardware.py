"""Hardware service benchmark: what the service adds on top of plain Modbus.

    .venv/bin/python tests/bench/bench_hardware.py [--n 200] [--actions 40]

Against the simulator in-process (speed 1000: a robot move takes ~6-14 ms):

- a Modbus read of the robot block: ``PlcLink`` vs a bare pymodbus client (reference)
- a full watcher poll (every block) vs one bare read per block (reference)
- a robot action: accepted by the nameko service and its result event received,
  vs the same handshake run directly (``ActionRunner``, the reference)

The service row needs a transport: ``LINECTL_BENCH_AMQP_URI`` or RabbitMQ on
127.0.0.1:5672; without one it is left out.
"""

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections import defaultdict  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pymodbus.client import ModbusTcpClient  # noqa: E402

from services.hardware.action_requests import ActionRequest, CommandBuilder  # noqa: E402
from services.hardware.device.modbus import ModbusPort  # noqa: E402
from services.hardware.plc import PlcLink  # noqa: E402
from services.hardware.robot import ActionRunner  # noqa: E402
from services.hardware.sim.control import SimControl  # noqa: E402
from services.hardware.sim.model import SimOptions  # noqa: E402
from services.hardware.sim.server import LineSimulator  # noqa: E402
from services.hardware.watcher import SignalWatcher  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.layout import load_layout  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(fn, n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1000)
    return statistics.median(samples), sorted(samples)[int(len(samples) * 0.95) - 1]


def actions(builder, n):
    """Tool actions on the piece in buffer slot 1: they can repeat forever."""
    plan = []
    for i in range(n):
        plan.append(builder.scan(1, job_id=i + 1) if i % 2 else builder.mark(1, f"M{i}", job_id=i + 1))
    return plan


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--actions", type=int, default=40)
    args = parser.parse_args()
    layout = load_layout(Settings().line_file)
    port = free_port()
    sim = LineSimulator(layout, SimOptions(speed=1000.0, seed=1), "127.0.0.1", port).start()
    rows = []
    try:
        bare = ModbusTcpClient("127.0.0.1", port=port, timeout=5, retries=0)
        bare.connect()
        link = PlcLink("127.0.0.1", port, layout.plc.unit_id)
        rows.append(("read robot block (48 regs)",
                     timed(lambda: bare.read_holding_registers(layout.plc.robot_base, count=48,
                                                               device_id=1), args.n),
                     timed(lambda: link.read(layout.plc.robot_base, 48), args.n)))

        blocks = [(layout.plc.robot_base + 12, 4), (layout.plc.dock_base, 2),
                  (layout.plc.buffer_base, layout.buffer_slots)] + [(e.base, e.size) for e in layout.plc.equipment]
        watcher = SignalWatcher(ModbusPort(PlcLink("127.0.0.1", port, layout.plc.unit_id), layout), layout)
        rows.append(("watcher poll (every block)",
                     timed(lambda: [bare.read_holding_registers(a, count=c, device_id=1) for a, c in blocks],
                           args.n),
                     timed(watcher.poll, args.n)))

        builder = CommandBuilder(layout)
        runner = ActionRunner(ModbusPort(link, layout), layout, action_timeout=30)  # the service's poll interval
        runner.run(ActionRequest("warm", 1, builder.dock_to_buffer(1)))
        plan = iter(actions(builder, 10**6))
        ids = iter(range(2, 10**6))
        direct = timed(lambda: runner.run(ActionRequest("b", next(ids), next(plan))), args.actions)
        service = bench_service(layout, port, args.actions)
        if service:
            rows.append(("robot action accept→result", direct, service))
        bare.close()
        link.close()
        SimControl(layout, "127.0.0.1", port).close()
    finally:
        sim.stop()

    print(f"{'measure':32} {'reference p50/p95 ms':>22} {'linectl p50/p95 ms':>22} {'ratio p50':>10}")
    for name, (ref50, ref95), (ours50, ours95) in rows:
        print(f"{name:32} {ref50:>10.2f} / {ref95:<9.2f} {ours50:>10.2f} / {ours95:<9.2f} {ours50 / ref50:>9.2f}x")
    if not service:
        print("(robot action via the service left out: no AMQP transport)")


def bench_service(layout, port, n):
    amqp = os.environ.get("LINECTL_BENCH_AMQP_URI", "amqp://guest:guest@127.0.0.1:5672/")
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=0.5).close()
    except OSError:
        if "LINECTL_BENCH_AMQP_URI" not in os.environ:
            return None
    from nameko.containers import ServiceContainer
    from nameko.events import BROADCAST, event_handler
    from nameko.standalone.rpc import ServiceRpcProxy

    from services.hardware.service import HardwareService
    from shared import events as ev

    done = defaultdict(eventlet.Event)  # action id -> its result, whichever side comes first

    class Listener:
        name = "bench_hardware_listener"

        @event_handler(ev.HARDWARE, ev.TOOL_ACTION_SUCCEEDED, handler_type=BROADCAST,
                       reliable_delivery=False)
        def on_result(self, payload):
            done[payload["actionId"]].send(payload)

    config = {"AMQP_URI": amqp, "serializer": "json", "max_workers": 20,
              "LINECTL_PLC_ADDRESS": f"127.0.0.1:{port}"}
    containers = [ServiceContainer(HardwareService, config), ServiceContainer(Listener, config)]
    for c in containers:
        c.start()
    try:
        with ServiceRpcProxy("hardware", config, timeout=30) as proxy:
            def one(i=iter(range(10**6))):
                k = next(i)
                answer = (proxy.scan("b", 1, job_id=k + 1) if k % 2
                          else proxy.mark("b", 1, f"M{k}", job_id=k + 1))
                done[answer["actionId"]].wait()
            one()
            return timed(one, n)
    finally:
        for c in containers:
            c.stop()


if __name__ == "__main__":
    main()
