"""The whole stack for flow tests: the line simulator (Modbus, or OPC UA where a
module parametrizes ``protocol``) in-process on a free port at high speed, the
real hardware service pointed at it, and the real line_controller (scheduler
wired) on the test's database and transport (tests/flow/stack.py: the Line and
the Floor, which adds the gateway and the PLC's fault injection).
Commands go through the real ``command`` RPC."""

from __future__ import annotations

import functools
import logging

import pytest
from nameko.standalone.rpc import ServiceRpcProxy

from services.hardware.service import HardwareService
from services.hardware.sim.model import SimOptions
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from services.hardware.sim.server import LineSimulator
from services.line_controller.service import LineControllerService
from shared import events as ev
from tests.flow import stack
from tests.flow.stack import Line
from tests.support.ports import free_port
from tests.support.waiting import wait_for


@pytest.fixture(autouse=True)
def _hardware_sessions_in_the_report(caplog):
    """A failing flow test's report shows the hardware's link story (sessions opened,
    subscriptions, the watcher's edges), not only its warnings."""
    caplog.set_level(logging.INFO, logger="services.hardware")


SIM_SPEED = 1000.0  # a 12 s machining cycle takes 12 ms; the transport dominates
# The (transport, protocol) pairs a module runs a whole order on: each transport once
# and each field protocol once, not their cross product (nothing in an order's path
# depends on the two together).
TRANSPORT_PROTOCOL = pytest.mark.parametrize(("transport", "protocol"),
                                             [("pgsql", "modbus"), ("rabbitmq", "opcua")])


@pytest.fixture
def transport():
    """The message transport: pgsql:// (the default), or ``rabbitmq`` where a test
    parametrizes it, the way a plant that outgrows one box runs it (skipped without
    RabbitMQ locally, required in CI)."""
    return "pgsql"


@pytest.fixture
def nameko_config(request, db_url, amqp_uri, transport):
    uri = request.getfixturevalue("rabbit_uri") if transport == "rabbitmq" else amqp_uri
    return {"AMQP_URI": uri, "serializer": "json", "LINECTL_DATABASE_URL": db_url, "max_workers": 20}


@pytest.fixture
def sim_options():
    # A large pallet: the snapshot does not know how many pieces the dock holds
    # (see docs/scheduler.md), so the dock must not run dry under a refill.
    return SimOptions(speed=SIM_SPEED, scrap_rate=0.25, seed=11, pallet_size=500, pallet_seconds=1.0)


@pytest.fixture
def protocol():
    """What the simulator speaks (a module parametrizes it over tests.hardware.conftest.PROTOCOLS)."""
    return "modbus"


@pytest.fixture
def line(container_factory, nameko_config, engine, layout, sim_options, protocol):
    port = free_port()
    if protocol == "opcua":
        simulator = OpcUaLineSimulator(layout, sim_options, "127.0.0.1", port).start()
    else:
        simulator = LineSimulator(layout, sim_options, "127.0.0.1", port).start()
    config = {**nameko_config, "LINECTL_PLC_ADDRESS": simulator.address,
              "LINECTL_HW_ACTION_TIMEOUT": 20.0, "LINECTL_HW_MODBUS_TIMEOUT": 5.0,
              "LINECTL_STEP_TIMEOUT": 30.0}
    containers = [container_factory(HardwareService, config),
                  container_factory(LineControllerService, config)]
    for container in containers:
        container.start()
    try:
        with ServiceRpcProxy(ev.HARDWARE, config, timeout=30) as hw, \
                ServiceRpcProxy(ev.LINE_CONTROLLER, config, timeout=60) as proxy:
            wait_for(lambda: hw.plc_state()["connected"], 30, interval=0.1, message="the PLC")
            yield Line(engine, proxy, hw)
    finally:
        for container in containers:  # before the simulator goes away
            container.stop()
        simulator.stop()


@pytest.fixture
def floor_on(container_factory, nameko_config, engine, db_url):
    """``floor_on(cell)``: the floor on a started cell, as a context manager
    (tests.flow.stack.floor_on); a module's ``floor`` fixture picks the cell."""
    return functools.partial(stack.floor_on, container_factory=container_factory, nameko_config=nameko_config,
                             engine=engine, db_url=db_url)
