"""A hardware service killed with a request in hand: the transport delivers the
request again, to the next instance, and the robot must not move twice
(docs/state-machines.md, "Actions safe to repeat").

Found in the README walkthrough (tests/ops/test_walkthrough.py) under load: the
hardware was killed just after its robot took a move; the new instance got the
same request from the transport and sent the move again ("no piece at the
source position": the first move had taken it). The ack of a request goes with
the consumer's next claim or a second later (pgsql://), and RabbitMQ too
delivers again what a dead consumer had not acknowledged: only the hardware can
tell a request an earlier instance may have run.

Real processes (``run_service hardware``) on the in-process simulator; the
first one is SIGKILLed by the simulator the moment its robot takes the move."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from nameko.exceptions import UnknownService
from nameko.standalone.rpc import ClusterRpcProxy
from sqlalchemy import text

from shared import events as ev
from tests.support.processes import kill_group
from tests.support.waiting import wait_for

RPC_QUEUE = f"rpc-{ev.HARDWARE}"


@pytest.fixture
def start_hardware(db_url, amqp_uri, sim, tmp_path):
    """``run_service hardware`` as a process of its own, on the simulator."""
    env = {**os.environ, "LINECTL_DATABASE_URL": db_url, "LINECTL_AMQP_URI": amqp_uri,
           "LINECTL_PLC": sim.address, "LINECTL_DATA_DIR": str(tmp_path / "data")}
    started = []

    def start(name: str) -> subprocess.Popen:
        log = (tmp_path / f"{name}.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "services.stack.run_service", "hardware"], env=env,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        kill_group(proc)


def kill_when_the_robot_takes_a_command(sim, proc: subprocess.Popen) -> list:
    """SIGKILL ``proc`` from the simulator's loop as its robot acknowledges the
    next command: the hardware has sent it, and has had no time for anything more."""
    model = sim.model
    original = model._robot_command
    taken = model.robot_log

    def take():
        before = len(taken)
        original()
        if len(taken) > before and proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
            model._robot_command = original

    model._robot_command = take
    return taken


def on_the_plc(rpc) -> bool:
    try:
        return rpc.hardware.plc_state()["connected"]
    except UnknownService:  # not started yet
        return False


def test_a_request_the_transport_delivers_again_after_a_kill_never_moves_the_robot_again(
        start_hardware, sim, engine, amqp_uri, tmp_path):
    rpc_config = {"AMQP_URI": amqp_uri, "serializer": "json"}

    def queued():  # the move's request in the transport (taken and not acknowledged, or waiting)
        with engine.connect() as c:
            return c.execute(text("SELECT count(*) FROM mq_message WHERE queue = :q AND payload LIKE :move"),
                             {"q": RPC_QUEUE, "move": "%dock_to_buffer%"}).scalar()

    first = start_hardware("first")
    with ClusterRpcProxy(rpc_config, timeout=30) as rpc:
        wait_for(lambda: on_the_plc(rpc), 60, 0.1, "the first instance on the PLC")
        robot_log = kill_when_the_robot_takes_a_command(sim, first)
        reply = rpc.hardware.dock_to_buffer.call_async("7", 1, 51)
        first.wait(30)
        assert len(robot_log) == 1, robot_log  # the move reached the robot, and then its sender died
        # The request's message outlived its consumer unacknowledged: the transport hands it out again.
        assert queued() == 1, "the request was acknowledged before the kill: nothing is delivered again"

        second = start_hardware("second")
        wait_for(lambda: queued() == 0, 60, 0.1,
                 lambda: f"the request delivered again and settled\n{(tmp_path / 'second.log').read_text()}")
        answer = reply.result()  # the first instance's, or (it died before replying) the second's
        known = rpc.hardware.known_actions()
        wait_for(lambda: sim.model.robot_log[-1][3] is not None, 30, 0.05, "the robot at rest")

    assert second.poll() is None
    # The robot moved once: the second instance did not send the move again.
    assert [entry[0] for entry in sim.model.robot_log] == [robot_log[0][0]], sim.model.robot_log
    assert "7" not in known["open"] + known["answered"], known
    # The caller heard the first instance accept it, or (it died before replying) the second say
    # that whether it happened is unknown, never the second accept it.
    assert ((answer["accepted"] and answer["instanceId"] != known["instanceId"])
            or (answer["accepted"], answer.get("errorCode")) == (False, ev.OUTCOME_UNKNOWN)), (answer, known)
