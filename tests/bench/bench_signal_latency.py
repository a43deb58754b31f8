"""Signal latency: a PLC edge → the watcher's signal, Modbus polling vs OPC UA
subscription, beside a bare asyncua client's notification (the reference).

    .venv/bin/python tests/bench/bench_signal_latency.py [--edges 100]

The edge is a pallet arrival (the dock's arrival counter moving) made in the
in-process simulator's model at a random moment; the latency is the time until
the watcher returns its ``PalletArrived`` (the service's own loop: ``watch()``
then dispatch). Modbus polls every 100 ms (the service's interval); OPC UA is
the simulator's 5 ms tick plus a 10 ms publishing interval plus the hand-over
from asyncua's OS thread to the green thread. The bare client subscribes to the
same variable on its own loop in an OS thread and notes when the notification
arrives there.
"""

import eventlet

eventlet.monkey_patch()

import argparse  # noqa: E402
import asyncio  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from services.hardware import plc as P  # noqa: E402
from services.hardware.device import open_port  # noqa: E402
from services.hardware.device.asyncio_bridge import ThreadLoop as _ThreadLoop  # noqa: E402
from services.hardware.device.asyncio_bridge import os_threading as _threading  # noqa: E402
from services.hardware.sim.model import SimOptions  # noqa: E402
from services.hardware.sim.opcua_server import OpcUaLineSimulator  # noqa: E402
from services.hardware.sim.server import LineSimulator  # noqa: E402
from services.hardware.watcher import SignalWatcher  # noqa: E402
from shared import events as ev  # noqa: E402
from shared.config import Settings  # noqa: E402
from shared.layout import load_layout  # noqa: E402
from tests.support.ports import free_port  # noqa: E402


def percentiles(samples):
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.99) - 1)]


def edge(sim):
    mem, at = sim.model.mem, sim.model.map.dock_base + P.D_ARRIVAL_SEQ
    mem[at] = (mem[at] + 1) & 0xFFFF
    return time.perf_counter()


def latencies(sim, edges: int, arrived: list[float], pause: tuple[float, float]) -> list[float]:
    """Make ``edges`` edges, ``pause`` (a range of seconds) apart: the milliseconds from
    each to the first arrival ``arrived`` gained after it (none within 2 s: no sample)."""
    samples = []
    for _ in range(edges):
        eventlet.sleep(random.uniform(*pause))
        before = len(arrived)
        made = edge(sim)
        deadline = time.monotonic() + 2
        while len(arrived) == before and time.monotonic() < deadline:
            eventlet.sleep(0.001)
        if len(arrived) > before:
            samples.append((arrived[before] - made) * 1000)
    return samples


def watcher_latency(sim, layout, edges):
    port = open_port(sim.address, layout, timeout=5.0, poll_interval=0.1)
    watcher = SignalWatcher(port, layout)
    seen: list[float] = []
    running = True

    def watch():
        while running:
            for event_type, _payload in watcher.watch(0.5):
                if event_type == ev.PALLET_ARRIVED:
                    seen.append(time.perf_counter())

    watcher.watch(2.0)  # connected, the first pallet
    thread = eventlet.spawn(watch)
    samples = latencies(sim, edges, seen, (0.15, 0.25))  # never two edges in one poll
    running = False
    thread.wait()
    port.close()
    return samples


def bare_client_latency(sim, edges):
    """asyncua alone: a subscription on its own loop in an OS thread."""
    from asyncua import Client, ua

    arrived: list[float] = []
    ready = _threading.Event()
    stop = _threading.Event()

    class Handler:
        def datachange_notification(self, node, value, data):
            arrived.append(time.perf_counter())

    async def run():
        async with Client(sim.address) as client:
            idx = await client.get_namespace_index("urn:linectl:cell")
            sub = await client.create_subscription(10, Handler())
            await sub.subscribe_data_change(client.get_node(ua.NodeId("Dock.Arrivals", idx)), queuesize=16)
            await asyncio.sleep(0.5)
            ready.set()
            while not stop.is_set():
                await asyncio.sleep(0.01)

    def main():
        loop = _ThreadLoop()
        loop.run_until_complete(run())
        loop.close()

    thread = _threading.Thread(target=main, daemon=True)
    thread.start()
    while not ready.is_set():
        eventlet.sleep(0.01)
    samples = latencies(sim, edges, arrived, (0.05, 0.1))
    stop.set()
    while thread.is_alive():
        eventlet.sleep(0.01)
    return samples


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--edges", type=int, default=100)
    args = parser.parse_args()
    layout = load_layout(Settings().line_file)
    options = SimOptions(speed=1.0, seed=1, pallet_size=4, pallet_seconds=3600)
    rows = []
    sim = LineSimulator(layout, options, "127.0.0.1", free_port()).start()
    try:
        rows.append(("Modbus: edge → watcher signal (100 ms polls)", watcher_latency(sim, layout, args.edges)))
    finally:
        sim.stop()
    sim = OpcUaLineSimulator(layout, options, "127.0.0.1", free_port()).start()
    try:
        rows.append(("OPC UA: edge → watcher signal (subscription)", watcher_latency(sim, layout, args.edges)))
        rows.append(("OPC UA: edge → bare asyncua notification", bare_client_latency(sim, args.edges)))
    finally:
        sim.stop()
    print(f"{'path':52} {'n':>4} {'p50 ms':>8} {'p99 ms':>8}")
    for name, samples in rows:
        p50, p99 = percentiles(samples) if samples else (float("nan"), float("nan"))
        print(f"{name:52} {len(samples):>4} {p50:8.1f} {p99:8.1f}")


if __name__ == "__main__":
    main()
