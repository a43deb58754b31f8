"""The simulator's servers as a PLC's servers behave, beyond the register map:
how fast an OPC UA subscription may publish, how fast a server stops."""

from __future__ import annotations

import time

import pytest

from services.hardware.device.opcua import OpcUaPort
from services.hardware.sim.opcua_server import OpcUaLineSimulator
from tests.support.ports import free_port


class _Ignored:
    def datachange_notification(self, *args):
        pass


def test_an_opc_ua_publishing_interval_is_the_fastest_a_subscription_is_granted(layout, sim_options):
    """A slow PLC's server (publishing_interval=50): a 10 ms request is revised to
    50 ms, a slower one granted as asked."""
    sim = OpcUaLineSimulator(layout, sim_options, "127.0.0.1", free_port(), publishing_interval=50).start()
    port = OpcUaPort(sim.address, layout, timeout=10.0)
    try:
        port.read_state()
        client = port._client
        granted = []
        for asked in (10, 80):
            sub = port._run(lambda asked=asked: client.create_subscription(asked, _Ignored()), "subscribe")
            granted.append(sub.parameters.RequestedPublishingInterval)
            port._run(sub.delete, "unsubscribe")
        assert granted == [50, 80]
    finally:
        port.close()
        sim.stop()


def test_a_publishing_interval_must_be_positive(layout, sim_options):
    with pytest.raises(ValueError, match="publishing_interval"):
        OpcUaLineSimulator(layout, sim_options, publishing_interval=0)


def test_an_opc_ua_simulator_stops_at_once(layout, sim_options):
    """Every OPC UA test stops a simulator: asyncua's stop waited out its clock's
    1 s sleep each time."""
    sim = OpcUaLineSimulator(layout, sim_options, "127.0.0.1", free_port()).start()
    began = time.monotonic()
    sim.stop()
    assert time.monotonic() - began < 0.5
    assert not sim._thread.is_alive()
