"""The line_controller's hardware port: a request it gave up on (the hardware
service was away past the timeout, so the task failed) must never run when
the service comes back — it expires in the broker."""

from nameko.rpc import rpc

from services.line_controller.dependencies import NamekoHardwarePort
from services.line_controller.hardware_port import HardwareRequest
from shared import events as ev


class StandInHardware:
    name = ev.HARDWARE
    served: list[str] = []

    @rpc
    def dock_to_buffer(self, correlation_id, slot_no, job_id=None):
        StandInHardware.served.append(correlation_id)
        return {"accepted": True, "actionId": len(StandInHardware.served), "instanceId": "stand-in"}


class RecordingLoop:
    def __init__(self):
        self.refused = []

    def refuse(self, req, code, message):
        self.refused.append((req.task_id, code))


def _request(task_id):
    return HardwareRequest("dock_to_buffer", task_id, ev.ROBOT_ACTION_FAILED, {"slot_no": 1})


def test_a_request_given_up_on_never_runs_when_the_hardware_returns(container_factory, nameko_config):
    StandInHardware.served = []
    first = container_factory(StandInHardware, nameko_config)
    first.start()
    first.stop()  # its request queue stays; nobody consumes it now
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=1.0)
    port._call(_request(7))  # the hardware is away: the wait runs out
    assert loop.refused == [(7, "CONNECTION_REFUSED")]

    port.close()

    container_factory(StandInHardware, nameko_config).start()
    port = NamekoHardwarePort(nameko_config, loop, timeout=20.0)
    try:
        port._call(_request(8))  # FIFO: had 7 survived, it would have been served first
    finally:
        port.close()
    assert StandInHardware.served == ["8"]
    assert port.accepted == {"8": "stand-in"} and loop.refused == [(7, "CONNECTION_REFUSED")]


def test_hardware_requests_reuse_their_clients(container_factory, nameko_config):
    # A client per request was a new transport connection, reply queue and consumer
    # for every hardware action (on pgsql:// a database session each).
    StandInHardware.served = []
    container_factory(StandInHardware, nameko_config).start()
    loop = RecordingLoop()
    port = NamekoHardwarePort(nameko_config, loop, timeout=20.0, clients=2)
    try:
        for task_id in range(10):
            port._call(_request(task_id))
        assert StandInHardware.served == [str(n) for n in range(10)] and loop.refused == []
        assert len(port.clients._all) == 1  # one client served them all, in turn
    finally:
        port.close()
    assert port.clients._all == []
