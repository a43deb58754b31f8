"""Fixtures for the hardware tests: the line simulator in a thread on a free
port, its fault-injection client, the hardware service pointed at it, and a
listener service collecting every hardware event."""

from __future__ import annotations

import time

import pytest
from nameko.events import BROADCAST, event_handler
from nameko.testing.services import entrypoint_hook
from nameko.testing.utils import get_extension

from services.hardware.dependencies import Hardware
from services.hardware.service import HardwareService
from services.hardware.sim.control import sim_control
from services.hardware.sim.model import SimOptions
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.sim.server import LineSimulator
from shared import events as ev
from shared.config import Settings
from shared.layout import load_layout
from tests.support.ports import free_port
from tests.support.waiting import wait_for

SPEED = 200.0  # a 12 s machining cycle takes 60 ms
# What a module runs on both: ``pytestmark = pytest.mark.parametrize("protocol", PROTOCOLS)``
# (the ``protocol`` fixture below is Modbus for every other test).
PROTOCOLS = ["modbus", "opcua"]



@pytest.fixture(scope="session")
def layout():
    return load_layout(Settings().line_file)


@pytest.fixture
def sim_options():
    return SimOptions(speed=SPEED, scrap_rate=0.0, seed=7, pallet_size=4, pallet_seconds=30.0)


@pytest.fixture
def sim_port():
    return free_port()


@pytest.fixture
def protocol():
    """What the simulator speaks and the hardware service with it."""
    return "modbus"


def start_simulator(protocol, layout, options, port, **kwargs):
    simulator = OpcUaLineSimulator if protocol == "opcua" else LineSimulator
    return simulator(layout, options, "127.0.0.1", port, **kwargs).start()


def plc_address(protocol, port) -> str:
    return f"opc.tcp://127.0.0.1:{port}" if protocol == "opcua" else f"127.0.0.1:{port}"


@pytest.fixture
def sim(layout, sim_options, sim_port, protocol):
    simulator = start_simulator(protocol, layout, sim_options, sim_port)
    yield simulator
    simulator.stop()


@pytest.fixture
def control(layout, sim):
    ctl = sim_control(layout, sim.address)
    yield ctl
    ctl.close()


class Received:
    """Every hardware event the listener saw, in arrival order."""

    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def of(self, event_type: str, **match) -> list[dict]:
        return [p for t, p in self.events
                if t == event_type and all(p.get(k) == v for k, v in match.items())]

    def wait(self, event_type: str, timeout: float = 20.0, **match) -> dict:
        return wait_for(lambda: (self.of(event_type, **match) or [None])[-1], timeout,
                        message=f"{event_type} {match}")

    def result(self, action_id: int, timeout: float = 20.0) -> tuple[str, dict]:
        def find():
            for t, p in self.events:
                if t in ev.WORKER_RESULTS and p.get("actionId") == action_id:
                    return t, p
            return None
        return wait_for(find, timeout, message=f"the result of action {action_id}")


def _listener(received: Received):
    def handler(event_type):
        @event_handler(ev.HARDWARE, event_type, handler_type=BROADCAST, reliable_delivery=False)
        def handle(self, payload):
            received.events.append((event_type, payload))
        handle.__name__ = f"on_{event_type}"
        return handle

    attrs = {"name": "hardware_listener"}
    for event_type in (*ev.WORKER_RESULTS, *ev.PLC_SIGNALS, ev.HARDWARE_STOPPING):
        attrs[f"on_{event_type}"] = handler(event_type)
    return type("HardwareListener", (), attrs)


@pytest.fixture
def received(container_factory, nameko_config):
    received = Received()
    container = container_factory(_listener(received), nameko_config)
    container.start()
    return received


@pytest.fixture
def hw_config(nameko_config, sim_port, protocol):
    # generous: the machine is shared; the fault tests shorten them where they need to
    return {**nameko_config,
            "LINECTL_PLC_ADDRESS": plc_address(protocol, sim_port),
            "LINECTL_HW_ACTION_TIMEOUT": 15.0,
            "LINECTL_HW_MODBUS_TIMEOUT": 5.0}


@pytest.fixture
def make_hardware(container_factory, hw_config, received, sim):
    """Start the hardware service (config overrides as keywords) and wait
    until its watcher saw the PLC."""

    made = []

    def make(**overrides):
        container = container_factory(HardwareService, {**hw_config, **overrides})
        made.append(container)
        container.start()
        received.wait(ev.PLC_CONNECTION, connected=True)
        return container

    yield make
    for container in made:  # before the simulator goes away
        container.stop()


@pytest.fixture
def hardware(make_hardware):
    return make_hardware()


def line_of(container):
    """The container's LineHardware (state the tests may inspect)."""
    return get_extension(container, Hardware).hardware


def call(container, method, *args, **kwargs):
    """One RPC of the hardware service, through its entrypoint."""
    with entrypoint_hook(container, method) as rpc:
        return rpc(*args, **kwargs)


def outcome(container, received, method, *args, **kwargs) -> tuple[str, dict]:
    """An action the service accepts, and the result event it then sends."""
    answer = call(container, method, *args, **kwargs)
    assert answer["accepted"] is True, answer
    return received.result(answer["actionId"])


def more_polls(watcher, n: int, timeout: float = 20.0) -> None:
    """Until the watcher has looked at the PLC ``n`` more times (Modbus polls every
    0.1 s; over OPC UA a look without a change comes every 0.5 s)."""
    polls = watcher.polls
    wait_for(lambda: watcher.polls >= polls + n, timeout, message=f"{n} more polls of the watcher")


def settle(watcher, expect: int = 0, first_wait: float = 1.0, quiet: float = 0.15, timeout: float = 15.0) -> list:
    """The watcher's signals until the PLC is quiet: everything one change brings,
    whether the port polls (Modbus) or is notified, maybe in several pictures (OPC UA).
    ``expect``: at least that many signals are due, waited for up to ``timeout`` (a
    loaded machine may take longer than ``quiet`` between two pictures of one change)."""
    signals = watcher.watch(first_wait)
    deadline = time.monotonic() + timeout
    while len(signals) < expect and time.monotonic() < deadline:
        signals += watcher.watch(min(1.0, max(deadline - time.monotonic(), 0.01)))
    while more := watcher.watch(quiet):
        signals += more
    return signals
