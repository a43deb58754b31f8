"""The line_controller's hardware port: a request it gave up on (the hardware
service was away past the timeout, so the task failed) must never run when
the service comes back — it expires in the broker."""

from nameko.rpc import rpc

from services.line_controller.dependencies import NamekoHardwarePort
from services.line_controller.scheduling import HardwareRequest
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

    container_factory(StandInHardware, nameko_config).start()
    port.timeout = 20.0
    port._call(_request(8))  # FIFO: had 7 survived, it would have been served first
    assert StandInHardware.served == ["8"]
    assert port.accepted == {"8": "stand-in"} and loop.refused == [(7, "CONNECTION_REFUSED")]
